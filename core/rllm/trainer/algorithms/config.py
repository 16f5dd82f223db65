"""Algorithm configuration types at rLLM's current path."""

from rllm.config.algorithm import AlgorithmConfig, rLLMAdvantageEstimator

__all__ = ["AlgorithmConfig", "rLLMAdvantageEstimator"]
