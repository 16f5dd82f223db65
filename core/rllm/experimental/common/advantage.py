"""Advantage registry, collection and the classic estimators at their documented path."""

from rllm.estimators.collect import collect_reward_and_advantage_from_trajectory_groups
from rllm.estimators.list_api import (
    RLLM_ADV_ESTIMATOR_REGISTRY,
    calculate_grpo_advantages,
    calculate_reinforce_advantages,
    calculate_reinforce_plus_plus_baseline_advantages,
    calculate_rloo_advantages,
    get_rllm_adv_estimator,
    register_rllm_adv_estimator,
)

__all__ = [
    "RLLM_ADV_ESTIMATOR_REGISTRY",
    "calculate_grpo_advantages",
    "calculate_reinforce_advantages",
    "calculate_reinforce_plus_plus_baseline_advantages",
    "calculate_rloo_advantages",
    "collect_reward_and_advantage_from_trajectory_groups",
    "get_rllm_adv_estimator",
    "register_rllm_adv_estimator",
]
