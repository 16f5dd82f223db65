"""The per-role ``batch/{role}/...`` difficulty diagnostics on hand-worked groups, and PRPO."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import rllm
from rllm import AlgorithmConfig, Step, Trajectory, TrajectoryGroup
from rllm.estimators.diagnostics import difficulty_metrics
from rllm.estimators.layout import GroupLayout
from rllm.trainer.algorithms.advantage import (
    calculate_prpo_advantages,
    collect_reward_and_advantage_from_trajectory_groups,
)
from rllm.trainer.algorithms.config import rLLMAdvantageEstimator


def _group(task: str, role: str, rewards: list[float]) -> TrajectoryGroup:
    trajectories = [Trajectory(name=role, reward=r, steps=[Step(response_ids=[7])]) for r in rewards]
    return TrajectoryGroup.for_task(task, role, trajectories)


def _batch(metrics: dict[str, float], role: str) -> dict[str, float]:
    prefix = f"batch/{role}/"
    return {k[len(prefix) :]: v for k, v in metrics.items() if k.startswith(prefix)}


def test_difficulty_of_hand_worked_groups() -> None:
    groups = [
        _group("easy", "solver", [1.0, 1.0, 1.0, 1.0]),  # zero spread, mean 1: too easy
        _group("hard", "solver", [0.0, 0.0]),  # zero spread, mean 0: too hard
        _group("one_of_four", "solver", [1.0, 0.0, 0.0, 0.0]),  # mean 1/4, std sqrt(3)/4: informative
        _group("half", "solver", [1.0, 0.0]),  # mean 1/2, std 1/2: informative
        _group("partial", "solver", [0.5, 0.5]),  # zero spread at a partial reward: in no bucket
        _group("lone", "solver", [1.0]),  # a group of one: left out of every diagnostic
        _group("lone", "judge", [0.0]),  # a role with only groups of one: no diagnostics at all
    ]
    metrics = collect_reward_and_advantage_from_trajectory_groups(groups, AlgorithmConfig())
    solver = _batch(metrics, "solver")
    assert solver["total"] == 5
    assert solver["informative"] == 2
    assert solver["fractions/effective"] == pytest.approx(2 / 5)
    assert solver["fractions/too_easy"] == pytest.approx(1 / 5)
    assert solver["fractions/too_hard"] == pytest.approx(1 / 5)
    # Group means sorted: 0, 1/4, 1/2, 1/2, 1. Linear percentiles sit at positions 4p:
    # p10 -> 0.4 of the way from 0 to 1/4; p50 -> 1/2; p90 -> 0.6 of the way from 1/2 to 1.
    assert solver["group_reward_mean/p10"] == pytest.approx(0.1)
    assert solver["group_reward_mean/p50"] == pytest.approx(0.5)
    assert solver["group_reward_mean/p90"] == pytest.approx(0.8)
    # Group stds sorted: 0, 0, 0, sqrt(3)/4, 1/2; p90 = sqrt(3)/4 + 0.6 (1/2 - sqrt(3)/4) = 0.3 + sqrt(3)/10.
    assert solver["group_reward_std/p10"] == 0.0
    assert solver["group_reward_std/p50"] == 0.0
    assert solver["group_reward_std/p90"] == pytest.approx(0.3 + math.sqrt(3) / 10)
    assert len(solver) == 11
    assert _batch(metrics, "judge") == {}


@pytest.mark.parametrize("seed", range(4))
def test_group_percentiles_are_numpys(seed: int) -> None:
    """1 to 40 groups of 3, with ties (and, for seed 3, a NaN reward): p10/p50/p90 equal ``np.percentile``'s."""
    rng = np.random.default_rng(seed)
    for n_groups in range(1, 41):
        rewards = rng.choice([0.0, 0.25, 1.0, rng.random()], size=(n_groups, 3))
        if seed == 3:
            rewards[n_groups // 2, 1] = math.nan
        layout = GroupLayout.from_sizes(np.full(n_groups, 3))
        with np.errstate(invalid="ignore"):
            metrics = difficulty_metrics("solver", rewards.ravel(), layout)
        means, stds = rewards.mean(axis=1), rewards.std(axis=1)
        expected = zip((10, 50, 90), np.percentile(means, (10, 50, 90)), np.percentile(stds, (10, 50, 90)), strict=True)
        for p, mean, std in expected:  # to rounding: the groups' std is summed in another order than numpy's
            assert metrics[f"batch/solver/group_reward_mean/p{p}"] == pytest.approx(mean, rel=1e-12, nan_ok=True)
            assert metrics[f"batch/solver/group_reward_std/p{p}"] == pytest.approx(std, rel=1e-12, nan_ok=True)


def test_no_diagnostics_on_the_validation_path_or_for_precomputed_groups() -> None:
    groups = [_group("t", "solver", [1.0, 0.0])]
    metrics = collect_reward_and_advantage_from_trajectory_groups(groups, AlgorithmConfig(), collect_advantage=False)
    assert _batch(metrics, "solver") == {}
    precomputed = _group("t", "judge", [1.0, 1.0])
    for traj in precomputed.trajectories:
        traj.steps[0].advantage = [0.5]
    metrics = collect_reward_and_advantage_from_trajectory_groups(
        [precomputed, _group("t", "solver", [1.0, 0.0])], AlgorithmConfig(use_precomputed_advantage=True)
    )
    assert _batch(metrics, "judge") == {}
    assert _batch(metrics, "solver")["total"] == 1


def test_groups_zeroed_for_nonfinite_rewards_are_left_out() -> None:
    groups = [_group("bad", "solver", [float("nan"), 1.0]), _group("good", "solver", [1.0, 1.0])]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", rllm.RLLMWarning)
        metrics = collect_reward_and_advantage_from_trajectory_groups(groups, AlgorithmConfig(nonfinite_rewards="zero"))
    assert _batch(metrics, "solver")["total"] == 1
    assert _batch(metrics, "solver")["fractions/too_easy"] == 1.0


def test_prpo_whitens_raw_rewards_over_the_role_batch() -> None:
    # Rewards 1, 0 | 1, 1: batch mean 3/4, population std sqrt(3)/4; no group baseline.
    std = math.sqrt(3) / 4
    expected = [0.25 / (std + 1e-6), -0.75 / (std + 1e-6), 0.25 / (std + 1e-6), 0.25 / (std + 1e-6)]
    a, b = _group("t1", "solver", [1.0, 0.0]), _group("t2", "solver", [1.0, 1.0])
    collect_reward_and_advantage_from_trajectory_groups([a, b], AlgorithmConfig(estimator="prpo"))
    got = [t.steps[0].advantage for g in (a, b) for t in g.trajectories]
    assert got == pytest.approx(expected)
    rewards = [np.array([1.0, 0.0]), np.array([1.0, 1.0])]
    advantages, returns = calculate_prpo_advantages(rewards, AlgorithmConfig())
    np.testing.assert_allclose(np.concatenate(advantages), expected, rtol=1e-12)
    np.testing.assert_allclose(np.concatenate(returns), expected, rtol=1e-12)
    # epsilon by keyword after the config, as upstream's signature has it: 0.25 / (std + 0.5).
    advantages, _ = calculate_prpo_advantages(rewards, AlgorithmConfig(), epsilon=0.5)
    assert advantages[0][0] == pytest.approx(0.25 / (std + 0.5))
    by_enum = rllm.compute_advantages(rLLMAdvantageEstimator.PRPO, [1.0, 0.0, 1.0, 1.0], [0, 0, 1, 1])
    np.testing.assert_allclose(by_enum, expected, rtol=1e-12)
