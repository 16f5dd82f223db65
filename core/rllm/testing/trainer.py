"""Conformance checks for a grouping hook and a backend, run through the trainer."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rllm.errors import ConformanceError, RLLMError

STAGES = (
    "generate_episodes",
    "transform_to_backend_batch",
    "process_backend_batch",
    "compute_advantages",
    "update_policy",
)
"""The stages the trainer calls on a backend for every training batch, in this order."""


def sample_episodes() -> list[Any]:
    """Episodes of three tasks (one id containing ':'), two roles, four rollouts each; rewards vary."""
    from rllm.types import Episode, Step, Trajectory

    episodes = []
    for task in ("a", "b:2", "c"):
        for rollout in range(4):
            trajectories = [
                Trajectory(name=role, reward=float((rollout + len(role)) % 3), steps=[Step(response_ids=[1, 2, 3])])
                for role in ("solver", "judge")
            ]
            episodes.append(Episode(id=f"{task}:{rollout}", trajectories=trajectories))
    return episodes


def check_grouping_hook(name: str, options: Mapping[str, Any] | None = None) -> None:
    """The trainer's grouping step with hook ``name``: a list of groups holding each trajectory at most once."""
    from rllm.config.stages import CompactFilteringConfig
    from rllm.plugins.manager import get_plugin_manager
    from rllm.trainer.grouping import transform_episodes_to_trajectory_groups

    hook = get_plugin_manager().grouping_hooks.resolve(name).target
    episodes = sample_episodes()
    given = sum(len(e.trajectories) for e in episodes)
    where = f"{len(episodes)} episodes of tasks a, b:2, c with roles solver and judge"
    try:
        groups, _ = transform_episodes_to_trajectory_groups(
            episodes, lambda eps: hook(eps, **dict(options or {})), CompactFilteringConfig()
        )
    except RLLMError as exc:
        raise ConformanceError(f"grouping hook {name!r} breaks 'returns groups': {exc}; input: {where}") from None
    seen = [id(t) for g in groups for t in g.trajectories]
    if len(seen) != len(set(seen)):
        raise ConformanceError(
            f"grouping hook {name!r} breaks 'each trajectory once': a trajectory is in two groups; input: {where}"
        )
    known = {id(t) for e in episodes for t in e.trajectories}
    if not set(seen) <= known:
        raise ConformanceError(f"grouping hook {name!r} breaks 'groups hold the given trajectories'; input: {where}")
    if not groups or len(seen) > given:
        raise ConformanceError(
            f"grouping hook {name!r} breaks 'returns groups': it returned no trajectories; input: {where}"
        )


def check_backend(
    name: str, tmp_path: Path, *, overrides: Sequence[str] = (), trainer_args: Mapping[str, Any] | None = None
) -> None:
    """A two-step ``rllm.backend=name`` run: each batch calls the stages once, in order, and
    every step has an advantage before ``update_policy``; two updates, then a checkpoint step."""
    from rllm.config import load_config
    from rllm.plugins.hook_kinds import backend_class
    from rllm.plugins.manager import get_plugin_manager
    from rllm.trainer.unified import UnifiedTrainer

    cls = backend_class(get_plugin_manager().backends.resolve(name))
    calls: list[str] = []
    problems: list[str] = []

    def recorder(stage: str) -> Any:
        original = getattr(cls, stage)

        async def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
            state = args[0] if args and stage != "generate_episodes" else None
            if stage == "update_policy" and state is not None and not state.validating:
                missing = [
                    s for g in state.trajectory_groups for t in g.trajectories for s in t.steps if s.advantage is None
                ]
                if missing:
                    problems.append(f"{len(missing)} step(s) had no advantage when update_policy ran")
            calls.append(stage if not kwargs.get("is_validation") and not (args[2:3] and args[2]) else "validate")
            return await original(self, *args, **kwargs)

        def plain(self: Any, *args: Any, **kwargs: Any) -> Any:
            calls.append(stage)
            return original(self, *args, **kwargs)

        import inspect

        return wrapped if inspect.iscoroutinefunction(original) else plain

    recording = type(f"Checked{cls.__name__}", (cls,), {stage: recorder(stage) for stage in STAGES})
    config = load_config(
        overrides=[
            f"rllm.backend={name}",
            "rllm.trainer.total_batches=2",
            "rllm.trainer.test_freq=0",
            "rllm.trainer.val_before_train=false",
            f"rllm.trainer.output_dir={tmp_path / 'run'}",
            "rllm.trainer.logger=[jsonl]",
            f"rllm.episode_logging.episode_log_dir={tmp_path / 'episodes'}",
            *overrides,
        ]
    )
    trainer = UnifiedTrainer(recording, config, progress=False, **dict(trainer_args or {}))
    try:
        trainer.fit()
    except RLLMError as exc:
        raise ConformanceError(
            f"backend {name!r} breaks 'a two-step run completes': {type(exc).__name__}: {exc}"
        ) from None
    finally:
        trainer.shutdown()
    training = [c for c in calls if c != "validate"]
    expected = list(STAGES) * 2
    if training[: len(expected)] != expected or problems:
        detail = "; ".join(problems) or f"stages ran as {training}, expected {expected}"
        raise ConformanceError(f"backend {name!r} breaks 'the stage contract' on a two-step run: {detail}")
