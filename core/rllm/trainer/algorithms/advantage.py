"""The advantage registry, collection and built-in estimators at rLLM's current path."""

from rllm.config.algorithm import AlgorithmConfig, rLLMAdvantageEstimator
from rllm.estimators.collect import collect_reward_and_advantage_from_trajectory_groups
from rllm.estimators.list_api import (
    RLLM_ADV_ESTIMATOR_REGISTRY,
    calculate_grpo_advantages,
    calculate_prpo_advantages,
    calculate_reinforce_advantages,
    calculate_reinforce_plus_plus_baseline_advantages,
    calculate_rloo_advantages,
    get_adv_estimator,
    get_rllm_adv_estimator,
    register_adv_estimator,
    register_rllm_adv_estimator,
)
from rllm.types import TrajectoryGroup

__all__ = [
    "RLLM_ADV_ESTIMATOR_REGISTRY",
    "AlgorithmConfig",
    "TrajectoryGroup",
    "calculate_grpo_advantages",
    "calculate_prpo_advantages",
    "calculate_reinforce_advantages",
    "calculate_reinforce_plus_plus_baseline_advantages",
    "calculate_rloo_advantages",
    "collect_reward_and_advantage_from_trajectory_groups",
    "get_adv_estimator",
    "get_rllm_adv_estimator",
    "rLLMAdvantageEstimator",
    "register_adv_estimator",
    "register_rllm_adv_estimator",
]
