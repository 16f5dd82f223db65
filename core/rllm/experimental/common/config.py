"""Algorithm configuration types at their documented path."""

from rllm.config.algorithm import AlgorithmConfig, rLLMAdvantageEstimator

__all__ = ["AlgorithmConfig", "rLLMAdvantageEstimator"]
