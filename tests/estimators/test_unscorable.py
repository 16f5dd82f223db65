"""Unscorable rewards (None/NaN) under ``nonfinite_rewards="exclude"``: out of every statistic, advantage 0."""

from __future__ import annotations

import contextlib
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rllm
from rllm.estimators.collect import collect_advantages
from rllm.toolkit import EstimatorStates
from rllm.types import Trajectory, TrajectoryGroup

ESTIMATORS = ["grpo", "dr_grpo", "rloo", "grpo_batch_std", "reinforce_plus_plus_baseline", "maxrl", "gpg", "reinforce"]


def test_grpo_by_hand() -> None:
    # Group 0 keeps [1, 0, 0]: mean 1/3, population std sqrt(2)/3, so (2/3) / (sqrt(2)/3) = sqrt(2) and
    # -(1/3) / (sqrt(2)/3) = -1/sqrt(2). Group 1 has no scorable rollout: all 0.
    got = rllm.compute_advantages(
        "grpo", [1.0, math.nan, 0.0, 0.0, math.nan, math.nan], [0, 0, 0, 0, 1, 1], nonfinite_rewards="exclude"
    )
    std = math.sqrt(2) / 3 + 1e-6
    np.testing.assert_allclose(got, [(2 / 3) / std, 0.0, -(1 / 3) / std, -(1 / 3) / std, 0.0, 0.0])


def test_gdpo_leaves_an_unscorable_component_out_of_that_component_only() -> None:
    # Component 0 [1, 0, 0, 1] -> [1, -1, -1, 1] (std 0.5); component 1 keeps [0, 1, 1] at positions 0, 2, 3
    # -> [-sqrt(2), 1/sqrt(2), 1/sqrt(2)], position 1 contributes 0. Sum [1 - sqrt 2, -1, 1/sqrt2 - 1, 1 + 1/sqrt2],
    # mean 0, then whitened by its population std.
    components = [[1.0, 0.0], [0.0, math.nan], [0.0, 1.0], [1.0, 1.0]]
    got = rllm.compute_advantages(
        "gdpo", [0.0] * 4, [0] * 4, reward_components=components, nonfinite_rewards="exclude", eps=0.0
    )
    r2 = math.sqrt(2)
    total = np.array([1 - r2, -1.0, 1 / r2 - 1, 1 + 1 / r2])
    np.testing.assert_allclose(got, total / total.std(), rtol=1e-9)
    with pytest.raises(rllm.RewardError, match=r"reward component 1 is NaN.*nonfinite_rewards='exclude'"):
        rllm.compute_advantages("gdpo", [0.0] * 4, [0] * 4, reward_components=components)


@st.composite
def batches_with_holes(draw: Any) -> tuple[list[float], list[int], list[bool]]:
    sizes = draw(st.lists(st.integers(1, 6), min_size=1, max_size=5))
    ids = [g for g, size in enumerate(sizes) for _ in range(size)]
    order = draw(st.permutations(range(len(ids))))
    ids = [ids[i] for i in order]
    rewards = draw(st.lists(st.sampled_from([0.0, 1.0, 0.5, 2.0, -1.0]), min_size=len(ids), max_size=len(ids)))
    holes = draw(st.lists(st.booleans(), min_size=len(ids), max_size=len(ids)))
    return rewards, ids, holes


@settings(max_examples=60, deadline=None)
@given(batches_with_holes(), st.sampled_from(ESTIMATORS))
def test_excluded_rollouts_never_affect_the_others(data: tuple[list[float], list[int], list[bool]], name: str) -> None:
    rewards, ids, holes = data
    with_holes = [math.nan if hole else r for r, hole in zip(rewards, holes, strict=True)]
    got = np.asarray(rllm.compute_advantages(name, with_holes, ids, nonfinite_rewards="exclude"))
    kept = [i for i, hole in enumerate(holes) if not hole]
    assert np.all(got[[i for i, hole in enumerate(holes) if hole]] == 0.0)
    if kept:
        alone = rllm.compute_advantages(name, [rewards[i] for i in kept], [ids[i] for i in kept])
        np.testing.assert_allclose(got[kept], alone, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("policy", ["zero", "exclude"])
def test_an_unscored_group_never_moves_a_stateful_estimators_state(policy: str) -> None:
    def groups(rewards: dict[str, list[float]]) -> list[TrajectoryGroup]:
        return [
            TrajectoryGroup.for_task(task, "solver", [Trajectory(name="solver", reward=r) for r in values])
            for task, values in rewards.items()
        ]

    config = rllm.AlgorithmConfig(estimator="ema_baseline", estimator_options={"decay": 0.5}, nonfinite_rewards=policy)
    states = EstimatorStates()
    collect_advantages(groups({"a": [1.0, 1.0]}), config, states=states)  # a's baseline: 1.0
    with pytest.warns(rllm.RLLMWarning) if policy == "zero" else contextlib.nullcontext():
        second = collect_advantages(groups({"a": [math.nan, math.nan], "b": [0.0, 1.0]}), config, states=states)
    # a was never scored: advantage 0, baseline still 1.0; b is new: baseline its mean 0.5
    assert second.roles["solver"].advantages.tolist() == [0.0, 0.0, -0.5, 0.5]
    assert states.state_dict()["ema_baseline"]["solver"]["baselines"] == {"a": 1.0, "b": 0.5}
