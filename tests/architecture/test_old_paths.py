"""Modules split or renamed by job keep their old import paths: each old path still gives the same objects."""

from __future__ import annotations

import importlib

import pytest

MOVED = [
    # (old module, name, new module)
    ("rllm.engine.rollout.openai_engine", "OpenAIEngine", "rllm.engine.rollout.openai_engine"),
    ("rllm.engine", "OpenAIEngine", "rllm.engine.rollout.openai_engine"),
    ("rllm.gateway.server", "Session", "rllm.gateway.session"),
    ("rllm.gateway", "Session", "rllm.gateway.session"),
    ("rllm.gateway.server", "MAX_BODY", "rllm.gateway.http_server"),
    ("rllm.testing.estimators", "Case", "rllm.testing.estimator_cases"),
    ("rllm.testing.estimators", "cases", "rllm.testing.estimator_cases"),
    *(("rllm.plugins.hookspecs", name, "rllm.plugins.markers") for name in ("PROJECT_NAME", "hookimpl", "hookspec")),
    *(
        ("rllm.plugins.hookspecs", f"rllm_register_{hook}", f"rllm.plugins.{family}_hooks")
        for family, hooks in {
            "advantage": ("estimators", "grouping_hooks", "kernels", "batch_fields"),
            "training": ("losses", "backends", "weight_syncs", "trackers"),
            "config": ("config_sections",),
        }.items()
        for hook in hooks
    ),
    *(("rllm.types", name, "rllm.types.episodes") for name in ("Step", "Trajectory", "Episode", "DEFAULT_TRAJ_NAME")),
    *(("rllm.types", name, "rllm.types.groups") for name in ("TrajectoryGroup", "DEFAULT_ROLE")),
    *(("rllm.types", name, "rllm.types.tasks") for name in ("Task", "Action", "AgentConfig", "TerminationEvent")),
    ("rllm.types", "TerminationReason", "rllm.contract.names"),
    ("rllm.types", "AgentFlow", "rllm.agents.flow"),
    ("rllm.types", "Evaluator", "rllm.eval.types"),
    *(
        ("rllm.plugins.contract", name, "rllm.plugins.hook_kinds")
        for name in importlib.import_module("rllm.plugins.hook_kinds").__all__
    ),
    *(
        ("rllm.trainer.engine", name, "rllm.rollouts.executors")
        for name in ("Executor", "LocalExecutor", "WorkflowCall", "episode_seed", "instantiate", "run_call")
    ),
    *(("rllm.trainer.engine", name, "rllm.rollouts.workflow_engine") for name in ("WorkflowEngine", "EngineStats")),
    *(("rllm.trainer", name, "rllm.rollouts.executors") for name in ("Executor", "LocalExecutor", "WorkflowCall")),
    ("rllm.trainer", "WorkflowEngine", "rllm.rollouts.workflow_engine"),
    *(
        ("rllm.trainer.parallel", name, "rllm.rollouts.parallel")
        for name in ("ProcessGroup", "share_of", "merge_counts")
    ),
    *(("rllm.trainer", name, "rllm.rollouts.parallel") for name in ("ProcessGroup", "share_of")),
    ("rllm.trainer.async_training", "SampledBatch", "rllm.rollouts.batch_source"),
    ("rllm.trainer.async_training", "SampledBatch", "rllm.rollouts"),
    *(
        ("rllm.trainer.distill.advantage", name, "rllm.workflows.distillation")
        for name in ("compute_distill_reverse_kl", "compute_step_distill_advantage", "discounted_future_sum")
    ),
]


@pytest.mark.parametrize(("old", "name", "new"), MOVED, ids=[f"{old}.{name}" for old, name, _ in MOVED])
def test_the_old_path_gives_the_moved_object(old: str, name: str, new: str) -> None:
    assert getattr(importlib.import_module(old), name) is getattr(importlib.import_module(new), name)


def test_the_openai_engine_keeps_its_server_methods() -> None:
    from rllm.engine.rollout.openai_engine import OpenAIEngine
    from rllm.engine.rollout.openai_servers import OpenAIServers

    assert issubclass(OpenAIEngine, OpenAIServers)
    for method in ("connect", "call", "server_for"):
        assert callable(getattr(OpenAIEngine, method))


def test_the_hook_specifications_are_all_still_in_hookspecs() -> None:
    """pluggy reads the specs from ``hookspecs``: every hook of every family is there, and only those."""
    import inspect

    from rllm.plugins import advantage_hooks, config_hooks, hookspecs, training_hooks

    def specs(module: object) -> set[str]:
        return {name for name, fn in inspect.getmembers(module, inspect.isfunction) if hasattr(fn, "rllm_spec")}

    families = [specs(advantage_hooks), specs(training_hooks), specs(config_hooks)]
    assert sum(len(f) for f in families) == 9 and specs(hookspecs) == set().union(*families)


def test_the_old_plugin_contract_path_gives_every_name_of_hook_kinds() -> None:
    from rllm.plugins import contract, hook_kinds

    assert len(hook_kinds.__all__) == 16 and sorted(contract.__all__) == sorted(hook_kinds.__all__)
    assert contract.HOOK_KIND["kernels"] is hook_kinds.HOOK_KIND["kernels"]


def test_the_ahead_sampler_is_the_batch_source_under_its_earlier_name() -> None:
    from rllm.rollouts import BatchSource
    from rllm.trainer.async_training import AheadSampler

    assert AheadSampler is BatchSource
