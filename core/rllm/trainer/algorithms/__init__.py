"""rLLM's current import paths for the advantage layer (``rllm.trainer.algorithms.*``).

Thin re-exports: the seed's ``rllm.experimental.common.*`` paths and these name the same
objects, so code written for either layout runs unchanged.
"""

from rllm.trainer.algorithms.advantage import collect_reward_and_advantage_from_trajectory_groups
from rllm.trainer.algorithms.config import AlgorithmConfig, rLLMAdvantageEstimator
from rllm.trainer.algorithms.metrics import reduce_metrics_by_trajectory_name, reduce_metrics_lists

__all__ = [
    "AlgorithmConfig",
    "collect_reward_and_advantage_from_trajectory_groups",
    "rLLMAdvantageEstimator",
    "reduce_metrics_by_trajectory_name",
    "reduce_metrics_lists",
]
