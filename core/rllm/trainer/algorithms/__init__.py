"""rLLM's current import paths for the advantage layer (``rllm.trainer.algorithms.*``).

Thin re-exports: the seed's ``rllm.experimental.common.*`` paths and these name the same
objects, so code written for either layout runs unchanged.
"""

from rllm.trainer.algorithms.advantage import collect_reward_and_advantage_from_trajectory_groups
from rllm.trainer.algorithms.config import (
    AlgorithmConfig,
    CompactFilteringConfig,
    KLControlConfig,
    RejectionSamplingConfig,
    RolloutCorrectionConfig,
    TransformConfig,
    rLLMAdvantageEstimator,
)
from rllm.trainer.algorithms.metrics import reduce_metrics_by_trajectory_name, reduce_metrics_lists
from rllm.trainer.algorithms.rejection_sampling import RejectionSamplingState, apply_rejection_sampling_and_filtering
from rllm.trainer.algorithms.transform import transform_episodes_to_trajectory_groups

__all__ = [
    "AlgorithmConfig",
    "CompactFilteringConfig",
    "KLControlConfig",
    "RejectionSamplingConfig",
    "RejectionSamplingState",
    "RolloutCorrectionConfig",
    "TransformConfig",
    "apply_rejection_sampling_and_filtering",
    "collect_reward_and_advantage_from_trajectory_groups",
    "rLLMAdvantageEstimator",
    "reduce_metrics_by_trajectory_name",
    "reduce_metrics_lists",
    "transform_episodes_to_trajectory_groups",
]
