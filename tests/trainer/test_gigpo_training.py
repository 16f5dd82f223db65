"""GiGPO trains the built-in multi-turn task through the trainer: the hook's states reach the estimator."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from rllm.trainer.logging import METRICS_FILE, read_metrics
from rllm.trainer.protocol import TrainerState
from rllm.trainer.unified import UnifiedTrainer
from rllm_builtin.embedded.backend import EmbeddedBackend


class RecordingBackend(EmbeddedBackend):
    """The embedded backend, recording each multi-step trajectory's step states and advantages."""

    seen: ClassVar[list[tuple[list[int], list[float]]]] = []

    async def update_policy(self, trainer_state: TrainerState) -> None:
        for group in trainer_state.trajectory_groups:
            for trajectory in group.trajectories:
                steps = trajectory.steps
                self.seen.append(([s.info["anchor_state"] for s in steps], [s.advantage for s in steps]))
        await super().update_policy(trainer_state)


def test_digit_chain_trains_with_gigpo_and_anchor_states(make_config) -> None:
    config = make_config(
        "rllm.embedded.tasks=[digit_chain]",
        "rllm.grouping_hook=anchor_states",
        "rllm.algorithm.adv_estimator=gigpo",
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
    # it trains; measured pass@1 0.00, 0.08, 0.36 and train reward 0.02 (first 3 steps) to 0.64 (last 5)
    assert len(pass_at_1) == 3 and pass_at_1[0] < 0.02 and pass_at_1[-1] > 0.15
    assert np.mean(rewards[-5:]) > 0.4 > 0.1 > np.mean(rewards[:3])
    # every rollout of a task starts from the same prompt: its first step's state is the group's first state
    assert all(states[0] == 0 for states, _ in RecordingBackend.seen)
    # the step level is at work: the steps of a multi-step trajectory get different advantages
    multi = [advantages for states, advantages in RecordingBackend.seen if len(states) > 1]
    assert sum(len(set(np.round(a, 9))) > 1 for a in multi) > 0.5 * len(multi)
