"""Both estimator calling conventions: the seed's ``fn(rewards, **kwargs)`` and today's
``fn(rewards, algorithm_config, **kwargs)`` with ``traj_groups``, at every door."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import rllm
from rllm import AlgorithmConfig, Step, Trajectory, TrajectoryGroup
from rllm.errors import EstimatorCallError, MissingInputError
from rllm.experimental.common.advantage import (
    calculate_grpo_advantages,
    calculate_reinforce_plus_plus_baseline_advantages,
    collect_reward_and_advantage_from_trajectory_groups,
    get_rllm_adv_estimator,
    register_rllm_adv_estimator,
)

pytestmark = pytest.mark.usefixtures("plugin_manager")


def _group(task: str, role: str, rewards: list[float]) -> TrajectoryGroup:
    trajectories = [Trajectory(name=role, reward=r, steps=[Step(response_ids=[1, 2])]) for r in rewards]
    return TrajectoryGroup.for_task(task, role, trajectories)


def test_todays_convention_receives_the_run_config_and_the_aligned_groups() -> None:
    seen: list[tuple[Any, list[TrajectoryGroup], list[list[float]]]] = []

    @register_rllm_adv_estimator("spy_today")
    def spy(rewards: list[np.ndarray], algorithm_config: AlgorithmConfig, **kwargs: Any) -> Any:
        seen.append((algorithm_config, kwargs["traj_groups"], [r.tolist() for r in rewards]))
        return rewards, rewards

    a, b, j = _group("t1", "solver", [1.0, 0.0]), _group("t2", "solver", [3.0]), _group("t1", "judge", [5.0, 6.0])
    config = AlgorithmConfig(estimator="spy_today")
    collect_reward_and_advantage_from_trajectory_groups([a, j, b], config)
    by_role = {groups[0].role: (cfg, groups, rewards) for cfg, groups, rewards in seen}
    assert by_role["solver"][0] is config
    assert by_role["solver"][1] == [a, b] and by_role["solver"][1][1] is b
    assert by_role["solver"][2] == [[1.0, 0.0], [3.0]]
    assert by_role["judge"][1][0] is j
    assert [s.advantage for t in b.trajectories for s in t.steps] == [3.0]


def test_seed_convention_gets_the_settings_and_may_forward_them_to_a_builtin() -> None:
    @register_rllm_adv_estimator("seed_wrapper")
    def wrapper(rewards: list[np.ndarray], **kwargs: Any) -> Any:
        assert kwargs["norm_adv_by_std_in_grpo"] is False
        return calculate_grpo_advantages(rewards, **kwargs)

    g = _group("t", "solver", [1.0, 0.0, 0.0, 0.0])
    collect_reward_and_advantage_from_trajectory_groups(
        [g], AlgorithmConfig(estimator="seed_wrapper", norm_adv_by_std_in_grpo=False)
    )
    # No std division: the rewards minus their mean 1/4.
    assert [t.steps[0].advantage for t in g.trajectories] == pytest.approx([0.75, -0.25, -0.25, -0.25])


def test_explicitly_named_context_without_kwargs() -> None:
    @register_rllm_adv_estimator("named_context")
    def named(rewards: list[np.ndarray], algorithm_config: AlgorithmConfig, traj_groups: list[TrajectoryGroup]) -> Any:
        lengths = [[len(t.steps) for t in g.trajectories] for g in traj_groups]
        return [r * n for r, n in zip(rewards, lengths, strict=True)], rewards

    g = TrajectoryGroup.for_task(
        "t", "r", [Trajectory(reward=2.0, steps=[Step(), Step(), Step()]), Trajectory(reward=1.0, steps=[Step()])]
    )
    collect_reward_and_advantage_from_trajectory_groups([g], AlgorithmConfig(estimator="named_context"))
    assert [t.steps[0].advantage for t in g.trajectories] == [6.0, 1.0]


def test_compute_advantages_builds_a_config_from_its_settings() -> None:
    @register_rllm_adv_estimator("reads_config")
    def reads(rewards: list[np.ndarray], algorithm_config: AlgorithmConfig, **kwargs: Any) -> Any:
        scale = 10.0 if algorithm_config.norm_adv_by_std_in_grpo else 1.0
        return [r * scale for r in rewards], rewards

    assert rllm.compute_advantages("reads_config", [1.0], [0]).tolist() == [10.0]
    assert rllm.compute_advantages("reads_config", [1.0], [0], norm_adv_by_std_in_grpo=False).tolist() == [1.0]


def test_an_estimator_requiring_traj_groups_without_them_is_a_named_error() -> None:
    @register_rllm_adv_estimator("needs_groups")
    def needs(rewards: list[np.ndarray], traj_groups: list[TrajectoryGroup]) -> Any:
        return rewards, rewards

    with pytest.raises(MissingInputError, match=r"'needs_groups'.*traj_groups"):
        rllm.compute_advantages("needs_groups", [1.0, 2.0], [0, 0])
    groups = [_group("t", "r", [1.0, 2.0])]
    advantages, _ = get_rllm_adv_estimator("needs_groups")([np.array([1.0, 2.0])], traj_groups=groups)
    assert advantages[0].tolist() == [1.0, 2.0]


def test_grpo_reads_norm_adv_by_std_in_grpo_from_a_positional_config() -> None:
    rewards = [np.array([1.0, 0.0, 0.0, 0.0])]
    centred = [0.75, -0.25, -0.25, -0.25]
    # mean 1/4, population std sqrt(3)/4, eps 1e-6
    scaled = [x / (math.sqrt(3) / 4 + 1e-6) for x in centred]
    off, on = AlgorithmConfig(norm_adv_by_std_in_grpo=False), AlgorithmConfig(norm_adv_by_std_in_grpo=True)
    np.testing.assert_allclose(calculate_grpo_advantages(rewards, off)[0][0], centred)
    np.testing.assert_allclose(calculate_grpo_advantages(rewards, on)[0][0], scaled)
    np.testing.assert_allclose(calculate_grpo_advantages(rewards, algorithm_config=off)[0][0], centred)
    np.testing.assert_allclose(get_rllm_adv_estimator("grpo")(rewards, off)[0][0], centred)
    # The keyword call the collection step makes upstream, traj_groups included.
    groups = [_group("t", "r", [1.0, 0.0, 0.0, 0.0])]
    fn = get_rllm_adv_estimator(rllm.rLLMAdvantageEstimator.GRPO)
    np.testing.assert_allclose(fn(rewards=rewards, algorithm_config=off, traj_groups=groups)[0][0], centred)
    # The seed's forms are unchanged.
    np.testing.assert_allclose(calculate_grpo_advantages(rewards, False)[0][0], centred)
    np.testing.assert_allclose(calculate_grpo_advantages(rewards, norm_adv_by_std_in_grpo=False)[0][0], centred)


def test_config_epsilon_and_explicit_options_at_the_list_api() -> None:
    # [1, 0]: centred +-0.5, population std 0.5; epsilon 0.5 from the config gives 0.5 / 1.0.
    config = AlgorithmConfig(epsilon=0.5)
    assert calculate_grpo_advantages([np.array([1.0, 0.0])], config)[0][0][0] == pytest.approx(0.5)
    # An explicit option wins over the config's.
    assert calculate_grpo_advantages([np.array([1.0, 0.0])], config, epsilon=0.0)[0][0][0] == pytest.approx(1.0)


def test_reinforce_plus_plus_baseline_epsilon_in_both_positions() -> None:
    # Centred [-1, 1]; population std 1; epsilon 1 -> -0.5, 0.5.
    rewards = [np.array([0.0, 2.0])]
    assert calculate_reinforce_plus_plus_baseline_advantages(rewards, 1.0)[0][0].tolist() == [-0.5, 0.5]
    today = calculate_reinforce_plus_plus_baseline_advantages(rewards, AlgorithmConfig(), 1.0)
    assert today[0][0].tolist() == [-0.5, 0.5]


def test_arguments_of_neither_convention_are_a_named_error() -> None:
    rewards = [np.array([1.0, 2.0])]
    with pytest.raises(EstimatorCallError, match="rloo_advantages"):
        get_rllm_adv_estimator("rloo")(rewards, {"norm_adv_by_std_in_grpo": False})
    with pytest.raises(EstimatorCallError, match="both by position and by keyword"):
        calculate_grpo_advantages(rewards, AlgorithmConfig(), algorithm_config=AlgorithmConfig())
    with pytest.raises(EstimatorCallError, match="positional arguments"):
        calculate_grpo_advantages(rewards, AlgorithmConfig(), True)
