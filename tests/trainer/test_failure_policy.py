"""rllm.workflow.failure_policy on the local executor: a workflow raising on one task, under each policy.

Also the episode seeds: what an episode samples depends on the run seed and its (task, rollout)
index only, never on scheduling, so a retried rollout repeats the episode it would have been.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import Counter
from typing import Any

import pytest

from rllm.cli.main import main
from rllm.errors import ConfigError, WorkflowError
from rllm.plugins.manager import PluginManager
from rllm.plugins.registry import Source
from rllm.trainer.engine import WorkflowEngine, episode_seed
from rllm.types import Episode
from rllm_builtin.embedded import ArithmeticWorkflow, EmbeddedBackend

BAD_TASK = "digit_sum:3+4"
ATTEMPTS: Counter[str] = Counter()

ONE_STEP = (
    "rllm.trainer.total_batches=1",
    "rllm.trainer.val_before_train=false",
    "rllm.trainer.test_freq=0",
    "rllm.data.train_batch_size=100",  # every digit_sum task in the one step
    "rllm.rollout.n=4",
    "rllm.trainer.resume_mode=disable",  # each run of a test starts over in the same directory
)


class RaisesOnOneTask(ArithmeticWorkflow):
    """The built-in workflow, except that every rollout of BAD_TASK raises."""

    async def run(self, task: dict[str, Any], uid: str, **kwargs: Any) -> Episode:
        ATTEMPTS[uid] += 1
        if task["uid"] == BAD_TASK:
            raise RuntimeError(f"the sandbox of {uid} is gone")
        return await super().run(task, uid, **kwargs)


class FailsFirstAttempt(ArithmeticWorkflow):
    """The built-in workflow, except that the first attempt of every rollout of BAD_TASK raises."""

    async def run(self, task: dict[str, Any], uid: str, **kwargs: Any) -> Episode:
        ATTEMPTS[uid] += 1
        if task["uid"] == BAD_TASK and ATTEMPTS[uid] == 1:
            raise ConnectionError("transient")
        return await super().run(task, uid, **kwargs)


@pytest.fixture(autouse=True)
def _fresh_counts() -> None:
    ATTEMPTS.clear()


def _train_step(make_config, train, workflow: type, *overrides: str) -> dict[str, Any]:
    _, metrics = train(make_config(*ONE_STEP, *overrides), workflow)
    [record] = [r for r in metrics if r["kind"] == "train"]
    return record


def test_drop_group_leaves_the_failing_task_out_and_counts_it(make_config, train) -> None:
    record = _train_step(make_config, train, RaisesOnOneTask, "rllm.workflow.failure_policy=drop_group")
    assert [ATTEMPTS[f"{BAD_TASK}:{k}"] for k in range(4)] == [1, 1, 1, 1]  # no retries under drop_group
    assert record["workflow/failed"] == 4 and record["workflow/retries"] == 0
    assert record["workflow/dropped_groups"] == 1 and record["workflow/dropped_rollouts"] == 4
    assert record["workflow/attempts"] == 400
    assert record["batch/num_episodes"] == 396 and record["grouping/num_groups"] == 99
    assert record["batch/termination_reason/error"] == 0  # nothing of the failed task reaches training
    assert record["batch/updated"] == 1.0


def test_retry_then_raise_on_error_false_drops_the_group_after_the_retries(make_config, train) -> None:
    record = _train_step(
        make_config, train, RaisesOnOneTask, "rllm.workflow.retry_limit=2", "rllm.workflow.raise_on_error=false"
    )
    assert [ATTEMPTS[f"{BAD_TASK}:{k}"] for k in range(4)] == [3, 3, 3, 3]
    assert record["workflow/retries"] == 8 and record["workflow/failed"] == 4
    assert record["workflow/attempts"] == 408
    assert record["workflow/dropped_groups"] == 1 and record["batch/num_episodes"] == 396


@pytest.mark.parametrize("policy", ["retry", "fail"])
def test_a_failure_that_stops_the_run_names_the_task_and_the_error(make_config, train, policy: str) -> None:
    with pytest.raises(WorkflowError) as caught:
        _train_step(make_config, train, RaisesOnOneTask, f"rllm.workflow.failure_policy={policy}")
    message = str(caught.value)
    assert f"task {BAD_TASK!r}" in message and "RuntimeError: the sandbox of digit_sum:3+4:" in message
    assert ("after 4 attempt(s)" if policy == "retry" else "after 1 attempt(s)") in message


def test_retry_reruns_the_episode_it_would_have_been(make_config, train) -> None:
    """A retried rollout keeps its seed: the step's metrics equal those of a run that never failed."""
    recovered = _train_step(make_config, train, FailsFirstAttempt)
    ATTEMPTS.clear()
    clean = _train_step(make_config, train, ArithmeticWorkflow)
    assert recovered["workflow/retries"] == 4 and recovered["workflow/attempts"] == 404
    assert recovered["workflow/dropped_groups"] == 0 and recovered["batch/num_episodes"] == 400
    same = [key for key in clean if key.startswith(("batch/", "reward/", "advantage/", "actor/"))]
    assert len(same) > 10
    assert {key: recovered[key] for key in same} == {key: clean[key] for key in same}


def test_fail_refuses_raise_on_error_false(make_config) -> None:
    from rllm.experimental.unified_trainer import UnifiedTrainer

    config = make_config("rllm.workflow.failure_policy=fail", "rllm.workflow.raise_on_error=false")
    with pytest.raises(ConfigError, match=r"failure_policy=fail .*raise_on_error=false.*drop_group"):
        UnifiedTrainer(None, config, progress=False)


def test_unknown_policy_is_refused_naming_the_key(make_config) -> None:
    with pytest.raises(
        ConfigError, match=r"rllm\.workflow\.failure_policy must be one of retry, drop_group, fail; got 'drop'"
    ):
        make_config("rllm.workflow.failure_policy=drop")


class RaisesOnEveryTask(ArithmeticWorkflow):
    async def run(self, task: dict[str, Any], uid: str, **kwargs: Any) -> Episode:
        raise RuntimeError(f"the sandbox of {uid} is gone")


class SlowOnOneTask(ArithmeticWorkflow):
    """The built-in workflow, except that every rollout of BAD_TASK takes 30 s."""

    async def run(self, task: dict[str, Any], uid: str, **kwargs: Any) -> Episode:
        if task["uid"] == BAD_TASK:
            await asyncio.sleep(30)
        return await super().run(task, uid, **kwargs)


def _train_at_the_cli(plugin_manager: PluginManager, workflow: type, tmp_path, *overrides: str) -> int:
    """``rllm train`` of the embedded backend with ``workflow`` as its built-in task's, registered as a plugin."""
    from rllm import hookimpl

    class Backend(EmbeddedBackend):
        def builtin_task(self) -> Any:
            setup = super().builtin_task()
            setup.workflow_class = workflow
            return setup

    plugin = type("WorkflowPlugin", (), {})()
    plugin.rllm_register_backends = hookimpl(lambda register: register("with_workflow", Backend))
    plugin_manager.register(plugin, Source("plugin", "with_workflow", "with-workflow-dist", "0.1"))
    return main(
        [
            "train",
            "--no-progress",
            "rllm.backend=with_workflow",
            f"rllm.trainer.output_dir={tmp_path / 'run'}",
            "rllm.trainer.logger=[jsonl]",
            *ONE_STEP,
            *overrides,
        ]
    )


def test_fail_is_one_line_at_the_cli(plugin_manager: PluginManager, tmp_path, capsys) -> None:
    code = _train_at_the_cli(plugin_manager, RaisesOnOneTask, tmp_path, "rllm.workflow.failure_policy=fail")
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1, err
    assert err[0].startswith("rllm train: error: Workflow RaisesOnOneTask failed on task 'digit_sum:3+4'")


def test_episodes_do_not_depend_on_scheduling(make_config, train) -> None:
    """One rollout at a time or all at once: the same samples, since each episode has its own seed."""
    serial = _train_step(make_config, train, ArithmeticWorkflow, "rllm.workflow.n_parallel_tasks=1")
    parallel = _train_step(make_config, train, ArithmeticWorkflow, "rllm.workflow.n_parallel_tasks=400")
    other_seed = _train_step(make_config, train, ArithmeticWorkflow, "rllm.workflow.seed=7")
    keys = [key for key in serial if key.startswith(("batch/", "reward/", "actor/"))]
    assert {k: serial[k] for k in keys} == {k: parallel[k] for k in keys}
    assert serial["reward/solver/mean"] != other_seed["reward/solver/mean"]


def test_episode_seeds_are_distinct_per_position_and_stable() -> None:
    seeds = {
        (mode, step, call, task, k): episode_seed(0, mode, step, call, task, k)
        for mode in ("train", "val")
        for step in range(3)
        for call in range(2)
        for task in range(5)
        for k in range(4)
    }
    assert len(set(seeds.values())) == len(seeds)
    assert all(0 <= seed < 2**63 for seed in seeds.values())
    assert episode_seed(0, "train", 1, 0, 2, 3) == seeds[("train", 1, 0, 2, 3)]
    assert episode_seed(1, "train", 1, 0, 2, 3) != seeds[("train", 1, 0, 2, 3)]
    # the documented derivation, whole: BLAKE2b (8 bytes) of the comma-joined position, little-endian, top bit off
    digest = hashlib.blake2b(b"0,val,2,1,4,3", digest_size=8).digest()
    assert seeds[("val", 2, 1, 4, 3)] == int.from_bytes(digest, "little") >> 1


def test_engine_gives_workflows_their_seed() -> None:
    import asyncio

    class Seeds(ArithmeticWorkflow):
        async def run(self, task: dict[str, Any], uid: str, **kwargs: Any) -> Episode:
            return Episode(metrics={"seed": self.seed})

    engine = WorkflowEngine(Seeds, seed=5)
    engine.set_training_step(3)
    episodes = asyncio.run(engine.execute_tasks([{}] * 4, ["a", "a", "b", "a"]))
    expected = [episode_seed(5, "train", 3, 0, t, k) for t, k in [(0, 0), (0, 1), (1, 0), (0, 2)]]
    assert [ep.metrics["seed"] for ep in episodes] == expected


def test_ray_executor_without_ray_says_how_to_install_it(make_config, monkeypatch) -> None:
    import importlib.util

    from rllm.experimental.unified_trainer import UnifiedTrainer

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a))
    with pytest.raises(ConfigError, match=r"rllm\.workflow\.executor=ray needs ray: pip install 'rllm\[ray\]'"):
        UnifiedTrainer(None, make_config("rllm.workflow.executor=ray"), progress=False)


def test_an_executor_passed_and_one_configured_is_refused(make_config) -> None:
    from rllm.experimental.unified_trainer import UnifiedTrainer
    from rllm.trainer.engine import LocalExecutor

    with pytest.raises(ConfigError, match=r"executor= and rllm\.workflow\.executor=ray; choose one"):
        UnifiedTrainer(None, make_config("rllm.workflow.executor=ray"), executor=LocalExecutor(), progress=False)


@pytest.mark.parametrize(
    ("overrides", "warning"),
    [
        (
            ("rllm.workflow.ray.num_workers=4",),
            r"rllm\.workflow\.ray\.num_workers=4 has no effect without rllm\.workflow\.executor=ray",
        ),
        (
            ("rllm.workflow.failure_policy=drop_group", "rllm.workflow.retry_limit=5"),
            r"rllm\.workflow\.retry_limit=5 has no effect without rllm\.workflow\.failure_policy=retry",
        ),
    ],
)
def test_keys_the_run_does_not_read_are_said(make_config, overrides: tuple[str, ...], warning: str) -> None:
    from rllm.errors import RLLMWarning
    from rllm.experimental.unified_trainer import UnifiedTrainer

    with pytest.warns(RLLMWarning, match=warning):
        UnifiedTrainer(None, make_config(*overrides), progress=False).shutdown()


def test_validation_says_what_it_dropped(make_config, train) -> None:
    config = make_config("rllm.trainer.val_only=true", "rllm.workflow.failure_policy=drop_group")
    _, metrics = train(config, RaisesOnOneTask)
    [record] = metrics
    assert record["kind"] == "val" and record["val/digit_sum/num_tasks"] == 99
    assert record["val/workflow/dropped_groups"] == 1 and record["val/workflow/failed"] == 1
    assert "val/workflow/attempts" not in record and "val/workflow/timeouts" not in record  # zero counts stay out


@pytest.mark.parametrize("require_update", [True, False])
def test_drop_group_that_drops_every_group_says_so_each_step_and_at_the_end(
    plugin_manager: PluginManager, tmp_path, capsys, require_update: bool
) -> None:
    code = _train_at_the_cli(
        plugin_manager,
        RaisesOnEveryTask,
        tmp_path,
        "rllm.workflow.failure_policy=drop_group",
        f"rllm.trainer.require_update={str(require_update).lower()}",
        "rllm.trainer.total_batches=2",
        "rllm.data.train_batch_size=3",
    )
    err = capsys.readouterr().err.strip().splitlines()
    dropped = "dropped every group (3 groups, 12 rollouts: their workflows failed); the policy was not updated."
    assert err[:2] == [
        f"rllm: warning: step {n}: nothing to train on: failure_policy=drop_group {dropped}" for n in (1, 2)
    ]
    if require_update:
        assert code == 2 and len(err) == 3, err
        assert err[2].startswith("rllm train: error: No step of this run updated the policy (2 of 2: ")
        assert "set rllm.trainer.require_update=false" in err[2]
    else:
        assert code == 0 and len(err) == 3, err
        assert err[2].startswith("rllm: warning: 2 of this run's steps trained nothing: failure_policy=drop_group")


def test_timed_out_rollouts_are_counted_and_said_each_step_and_at_the_end(make_config, train) -> None:
    from rllm.errors import RLLMWarning

    config = make_config(*ONE_STEP, "rllm.workflow.timeout=0.5")
    with pytest.warns(RLLMWarning) as caught:
        _, metrics = train(config, SlowOnOneTask)
    messages = [str(w.message) for w in caught]
    assert messages[0].startswith("step 1: 4 of 400 rollouts timed out (rllm.workflow.timeout=0.5 s), counted in")
    assert "its group trains without it" in messages[0]
    assert messages[-1] == "4 of this run's 400 rollouts timed out (workflow/timeouts)."
    [record] = [r for r in metrics if r["kind"] == "train"]
    assert record["workflow/timeouts"] == 4 and record["grouping/num_groups"] == 99
