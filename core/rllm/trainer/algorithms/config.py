"""Algorithm and trainer-stage configuration types at rLLM's current path."""

from rllm.config.algorithm import AlgorithmConfig, KLControlConfig, RolloutCorrectionConfig, rLLMAdvantageEstimator
from rllm.config.stages import CompactFilteringConfig, RejectionSamplingConfig, TransformConfig

__all__ = [
    "AlgorithmConfig",
    "CompactFilteringConfig",
    "KLControlConfig",
    "RejectionSamplingConfig",
    "RolloutCorrectionConfig",
    "TransformConfig",
    "rLLMAdvantageEstimator",
]
