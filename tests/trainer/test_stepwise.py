"""Turn-level credit: ``normalize_by_steps`` divides each step's advantage by its trajectory's step count."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np
import pytest

import rllm
from rllm.estimators.collect import collect_advantages
from rllm.trainer.logging import METRICS_FILE, read_metrics
from rllm.trainer.protocol import TrainerState
from rllm.trainer.unified import UnifiedTrainer
from rllm.types import Step, Trajectory, TrajectoryGroup
from rllm_builtin.embedded.backend import EmbeddedBackend


def _trajectory(step_rewards: list[float]) -> Trajectory:
    steps = [Step(prompt_ids=[0], response_ids=[1], reward=r) for r in step_rewards]
    return Trajectory(name="solver", steps=steps, reward=step_rewards[-1])


def test_every_estimator_is_divided_by_the_step_count_in_one_place() -> None:
    group = TrajectoryGroup.for_task("t", "solver", [_trajectory([0.0, 0.0, 1.0]), _trajectory([0.0])])
    grpo = rllm.AlgorithmConfig(estimator="grpo", normalize_by_steps=True)
    collected = collect_advantages([group], grpo)
    # grpo: rewards 1 and 0, mean 0.5, std 0.5 (+1e-6) -> +-0.999998; then / 3 steps and / 1 step
    a = 0.5 / (0.5 + 1e-6)
    assert [s.advantage for s in group.trajectories[0].steps] == pytest.approx([a / 3] * 3)
    assert group.trajectories[1].steps[0].advantage == pytest.approx(-a)
    assert collected.roles["solver"].advantages.lengths.tolist() == [3, 1]
    # a per-step estimator: reinforce++ with gamma 0.5 -> returns-to-go 0.25, 0.5, 1 and 0,
    # whitened over the four steps (mean 0.4375, population std), then divided per trajectory
    per_step = dataclasses.replace(grpo, estimator="reinforce_plus_plus", gamma=0.5)
    fresh = TrajectoryGroup.for_task("t", "solver", [_trajectory([0.0, 0.0, 1.0]), _trajectory([0.0])])
    collect_advantages([fresh], per_step)
    returns = np.array([0.25, 0.5, 1.0, 0.0])
    whitened = (returns - returns.mean()) / (returns.std() + 1e-8)
    got = [s.advantage for t in fresh.trajectories for s in t.steps]
    assert got == pytest.approx((whitened / [3, 3, 3, 1]).tolist(), rel=1e-5)
    unnormalised = collect_advantages(
        [fresh], dataclasses.replace(per_step, normalize_by_steps=False), write_steps=False
    )
    assert unnormalised.roles["solver"].advantages.values.tolist() == pytest.approx(whitened.tolist(), rel=1e-5)


class RecordingBackend(EmbeddedBackend):
    """The embedded backend, recording each step's advantage and what the estimator gave before the division."""

    seen: ClassVar[list[tuple[list[float], list[float]]]] = []

    async def update_policy(self, trainer_state: TrainerState) -> None:
        plain = dataclasses.replace(rllm.AlgorithmConfig.from_config(self.config), normalize_by_steps=False)
        raw = collect_advantages(trainer_state.trajectory_groups, plain, write_steps=False).roles["solver"]
        for i, trajectory in enumerate(raw.trajectories):
            row = raw.advantages.values[raw.advantages.offsets[i] : raw.advantages.offsets[i + 1]]
            self.seen.append(([s.advantage for s in trajectory.steps], row.tolist()))
        await super().update_policy(trainer_state)


def test_multi_turn_task_trains_with_reinforce_plus_plus_and_normalize_by_steps(make_config) -> None:
    config = make_config(
        "rllm.embedded.tasks=[digit_chain]",
        "rllm.algorithm.adv_estimator=reinforce_plus_plus",
        "rllm.algorithm.gamma=0.9",
        "rllm.stepwise_advantage.normalize_by_steps=true",
        "rllm.embedded.lr=3.0",
        "rllm.trainer.total_epochs=8",
        "rllm.trainer.test_freq=20",
    )
    RecordingBackend.seen = []
    trainer = UnifiedTrainer(RecordingBackend, config, progress=False)
    try:
        trainer.fit()
    finally:
        trainer.shutdown()
    records = read_metrics(trainer.output_dir / METRICS_FILE)
    pass_at_1 = [r["val/digit_chain/pass@1"] for r in records if r["kind"] == "val"]
    rewards = [r["reward/solver/mean"] for r in records if r["kind"] == "train"]
    # it trains; measured 0.00, 0.03, 0.18 (rllm.workflow.seed 1 and 2: 0.03, 0.13 and 0.02, 0.12)
    assert len(pass_at_1) == 3 and pass_at_1[0] < 0.02 and pass_at_1[0] < pass_at_1[1] < pass_at_1[2] > 0.05
    assert np.mean(rewards[-5:]) > 0.4 > 0.1 > np.mean(rewards[:3])
    multi = [(steps, raw) for steps, raw in RecordingBackend.seen if len(steps) == 3]
    assert len(multi) > 100
    for steps, raw in multi:
        assert steps == pytest.approx([value / 3 for value in raw])  # the division, step by step
    assert sum(len(set(np.round(steps, 9))) > 1 for steps, _ in multi) > 0.5 * len(multi)  # steps differ
