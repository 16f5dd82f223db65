"""Trainer-side mistakes: unscorable workflow rewards follow the policy, corrupt run files are named."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

import rllm
from rllm import AlgorithmConfig
from rllm.errors import OutputFileError, RewardError, RunDirError
from rllm.trainer.grouping import fill_trajectory_rewards
from rllm.trainer.logging import read_metrics
from rllm.types import Step, Trajectory, TrajectoryGroup


def _group(rewards: list[float | None]) -> TrajectoryGroup:
    return TrajectoryGroup.for_task("t", "solver", [Trajectory(steps=[Step(reward=r)]) for r in rewards])  # type: ignore[arg-type]


def test_none_step_reward_is_unscorable_under_every_policy() -> None:
    group = _group([1.0, None, 0.0])
    fill_trajectory_rewards(group)
    assert math.isnan(group.trajectories[1].reward)  # type: ignore[arg-type]
    with pytest.raises(RewardError, match="missing, NaN or infinite"):
        rllm.collect_reward_and_advantage_from_trajectory_groups([group], AlgorithmConfig())
    group = _group([1.0, None, 0.0])
    fill_trajectory_rewards(group)
    rllm.collect_reward_and_advantage_from_trajectory_groups([group], AlgorithmConfig(nonfinite_rewards="exclude"))
    # grpo over {1, 0}: mean 0.5, std 0.5 (+1e-6); the unscorable rollout gets 0.
    got = [t.steps[0].advantage for t in group.trajectories]
    assert got == pytest.approx([0.5 / 0.500001, 0.0, -0.5 / 0.500001])


@pytest.mark.parametrize(
    "line", [b"3", b'{"kind": "train", "step": "x"}', b'{"kind": "train", "step": 1, "x": "\xff"}']
)
def test_corrupt_metrics_line_is_named(tmp_path: Path, line: bytes) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b'{"kind": "train", "step": 1}\n' + line + b'\n{"kind": "train", "step": 2}\n')
    with pytest.raises(RunDirError, match=r"metrics.jsonl', line 2: not a metrics record"):
        read_metrics(path)


def test_plot_into_a_folder_and_a_read_only_folder(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from rllm.trainer.plot import plot_runs

    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"kind": "train", "step": 1, "reward/solver/mean": 0.5}\n')
    out = tmp_path / "figures"
    out.mkdir()
    assert plot_runs([run], out) == out / "learning_curves.png"
    assert (out / "learning_curves.png").read_bytes()[:4] == b"\x89PNG"
    blocker = tmp_path / "a_file"  # as unwritable as a read-only folder, even for root
    blocker.write_text("")
    with pytest.raises(OutputFileError, match=r"a_file/c\.png"):
        plot_runs([run], blocker / "c.png")


def test_steps_that_train_nothing_are_reported(make_config) -> None:
    from rllm.errors import RLLMWarning
    from rllm.trainer.unified import UnifiedTrainer

    config = make_config(
        "rllm.dynamic_sampling.enable=true",
        "rllm.dynamic_sampling.strategy=drop",
        "rllm.dynamic_sampling.tolerance=100",  # rewards are 0 or 1: every group counts as uniform
        "rllm.dynamic_sampling.max_rounds=1",
        "rllm.trainer.total_batches=2",
        "rllm.trainer.test_freq=0",
        "rllm.trainer.require_update=false",
    )
    trainer = UnifiedTrainer(None, config, progress=False)
    try:
        with pytest.warns(RLLMWarning) as caught:
            trainer.fit()
    finally:
        trainer.shutdown()
    messages = [str(w.message) for w in caught]
    assert sum("nothing to train on: every group was uniform or filtered out" in m for m in messages) == 2, messages
    assert "2 of this run's steps trained nothing" in messages[-1]


def test_a_run_no_step_of_which_updated_the_policy_is_an_error(make_config) -> None:
    from rllm.errors import RLLMWarning, TrainerError
    from rllm.trainer.unified import UnifiedTrainer

    config = make_config(
        "rllm.dynamic_sampling.enable=true",
        "rllm.dynamic_sampling.strategy=drop",
        "rllm.dynamic_sampling.tolerance=100",
        "rllm.dynamic_sampling.max_rounds=1",
        "rllm.trainer.total_batches=2",
        "rllm.trainer.test_freq=0",
    )
    trainer = UnifiedTrainer(None, config, progress=False)
    try:
        with pytest.warns(RLLMWarning, match="nothing to train on"), pytest.raises(TrainerError) as caught:
            trainer.fit()
    finally:
        trainer.shutdown()
    message = str(caught.value)
    assert message.startswith("No step of this run updated the policy (2 of 2: every group was uniform or filtered")
    assert "rllm.trainer.require_update=false" in message and "\n" not in message


def test_saved_estimator_state_the_estimator_cannot_read_is_named() -> None:
    from rllm.errors import CheckpointError
    from rllm.estimators.collect import collect_advantages
    from rllm.toolkit import EstimatorStates

    config = AlgorithmConfig(estimator="ema_baseline")
    states = EstimatorStates()
    states.load_state_dict({"ema_baseline": {"solver": {"renamed_field": {}}}}, "'run/checkpoints/step_2/x.json'")
    groups = [TrajectoryGroup.for_task("a", "solver", [Trajectory(name="solver", reward=r) for r in (1.0, 0.0)])]
    with pytest.raises(CheckpointError) as caught:
        collect_advantages(groups, config, states=states)
    message = str(caught.value)
    assert "Estimator 'ema_baseline' cannot read its saved state for role 'solver'" in message
    assert "'run/checkpoints/step_2/x.json'" in message and "resume_mode=disable" in message
