"""Every name of the documented API imports from its documented path and behaves as documented."""

from __future__ import annotations

import importlib
import math

import numpy as np
import pytest

DOCUMENTED = {
    "rllm.experimental.common.advantage": [
        "register_rllm_adv_estimator",
        "get_rllm_adv_estimator",
        "collect_reward_and_advantage_from_trajectory_groups",
        "calculate_grpo_advantages",
        "calculate_reinforce_advantages",
        "calculate_reinforce_plus_plus_baseline_advantages",
        "calculate_rloo_advantages",
        "RLLM_ADV_ESTIMATOR_REGISTRY",
    ],
    "rllm.experimental.common.config": ["rLLMAdvantageEstimator", "AlgorithmConfig"],
    "rllm.experimental.common.rl_algo": [
        "calculate_grpo_advantages_per_group",
        "calculate_rloo_advantages_per_group",
    ],
    "rllm.agents.agent": ["Step", "Trajectory", "Episode", "TrajectoryGroup"],
    "rllm.workflows.workflow": ["TerminationReason"],
}


@pytest.mark.parametrize(("module", "name"), [(m, n) for m, names in DOCUMENTED.items() for n in names])
def test_documented_name_imports(module: str, name: str) -> None:
    assert getattr(importlib.import_module(module), name) is not None


def test_grpo_on_one_group_of_four() -> None:
    from rllm.experimental.common.advantage import calculate_grpo_advantages

    advantages, returns = calculate_grpo_advantages([np.array([1.0, 0.0, 0.0, 0.0])])
    # mean 1/4, population std sqrt(3)/4: (1 - 1/4) / (sqrt(3)/4) = sqrt(3); -(1/4)/(sqrt(3)/4) = -1/sqrt(3)
    expected = [math.sqrt(3), -1 / math.sqrt(3), -1 / math.sqrt(3), -1 / math.sqrt(3)]
    np.testing.assert_allclose(advantages[0], expected, rtol=1e-5)
    np.testing.assert_allclose(returns[0], expected, rtol=1e-5)


def test_per_group_helpers_always_return_pairs() -> None:
    from rllm.experimental.common.rl_algo import (
        calculate_grpo_advantages_per_group,
        calculate_rloo_advantages_per_group,
    )

    for rewards in (np.array([2.0]), np.array([1.0, 3.0])):
        pair = calculate_rloo_advantages_per_group(rewards)
        assert isinstance(pair, tuple) and len(pair) == 2
        pair = calculate_grpo_advantages_per_group(rewards)
        assert isinstance(pair, tuple) and len(pair) == 2
    # A group of one: RLOO keeps the raw reward, GRPO uses mean 0 and std 1.
    np.testing.assert_allclose(calculate_rloo_advantages_per_group(np.array([2.0]))[0], [2.0])
    np.testing.assert_allclose(calculate_grpo_advantages_per_group(np.array([2.0]))[0], [2.0 / (1 + 1e-6)])
    # Two rewards 1 and 3: RLOO gives 1-3 and 3-1.
    np.testing.assert_allclose(calculate_rloo_advantages_per_group(np.array([1.0, 3.0]))[0], [-2.0, 2.0])


def test_epsilon_is_configurable_under_both_spellings() -> None:
    from rllm.experimental.common.advantage import calculate_grpo_advantages
    from rllm.experimental.common.rl_algo import calculate_grpo_advantages_per_group

    # [1, 0]: centred +-0.5, population std 0.5, so the advantage is 0.5 / (0.5 + eps).
    for eps in (1e-6, 0.5):
        expected = 0.5 / (0.5 + eps)
        assert calculate_grpo_advantages([np.array([1.0, 0.0])], epsilon=eps)[0][0][0] == pytest.approx(expected)
        assert calculate_grpo_advantages([np.array([1.0, 0.0])], episilon=eps)[0][0][0] == pytest.approx(expected)
        assert calculate_grpo_advantages_per_group(np.array([1.0, 0.0]), episilon=eps)[0][0] == pytest.approx(expected)
        assert calculate_grpo_advantages_per_group(np.array([1.0, 0.0]), epsilon=eps)[0][0] == pytest.approx(expected)


def test_empty_input_gives_empty_lists() -> None:
    from rllm.experimental.common import advantage

    for fn in (
        advantage.calculate_grpo_advantages,
        advantage.calculate_rloo_advantages,
        advantage.calculate_reinforce_advantages,
        advantage.calculate_reinforce_plus_plus_baseline_advantages,
    ):
        assert fn([]) == ([], [])


def test_decorator_registers_at_run_time_and_lookup_runs_it(plugin_manager: object) -> None:
    from rllm.experimental.common.advantage import (
        RLLM_ADV_ESTIMATOR_REGISTRY,
        get_rllm_adv_estimator,
        register_rllm_adv_estimator,
    )

    @register_rllm_adv_estimator("plus_one")
    def plus_one(rewards: list[np.ndarray], **kwargs: object) -> tuple[list[np.ndarray], list[np.ndarray]]:
        shifted = [r + 1 for r in rewards]
        return shifted, shifted

    rewards = [np.array([1.0, 2.0]), np.array([5.0])]
    advantages, returns = get_rllm_adv_estimator("plus_one")(rewards=rewards)
    assert [a.tolist() for a in advantages] == [[2.0, 3.0], [6.0]]
    assert [r.tolist() for r in returns] == [[2.0, 3.0], [6.0]]
    assert "plus_one" in RLLM_ADV_ESTIMATOR_REGISTRY
    assert RLLM_ADV_ESTIMATOR_REGISTRY["plus_one"](rewards)[0][1].tolist() == [6.0]


def test_builtin_lookup_returns_documented_convention() -> None:
    from rllm.experimental.common.advantage import get_rllm_adv_estimator
    from rllm.experimental.common.config import rLLMAdvantageEstimator

    fn = get_rllm_adv_estimator(rLLMAdvantageEstimator.RLOO)
    advantages, returns = fn(rewards=[np.array([1.0, 3.0]), np.array([5.0])], norm_adv_by_std_in_grpo=True)
    np.testing.assert_allclose(advantages[0], [-2.0, 2.0])
    np.testing.assert_allclose(advantages[1], [5.0])
    assert len(returns) == 2


def test_unknown_name_is_a_value_error_with_suggestion() -> None:
    from rllm.experimental.common.advantage import get_rllm_adv_estimator

    with pytest.raises(ValueError, match="Did you mean 'grpo'"):
        get_rllm_adv_estimator("grp")


def test_list_api_keeps_a_presets_epsilon_unless_one_is_given() -> None:
    from rllm.experimental.common.advantage import calculate_grpo_advantages

    # [1, 0] under TRL's numerics: unbiased std sqrt(0.5), eps 1e-4 -> 0.5 / (sqrt(0.5) + 1e-4).
    advantages, _ = calculate_grpo_advantages([np.array([1.0, 0.0])], preset="trl")
    assert advantages[0][0] == pytest.approx(0.5 / (math.sqrt(0.5) + 1e-4), rel=1e-6)
    advantages, _ = calculate_grpo_advantages([np.array([1.0, 0.0])], preset="trl", epsilon=0.5)
    assert advantages[0][0] == pytest.approx(0.5 / (math.sqrt(0.5) + 0.5), rel=1e-6)
