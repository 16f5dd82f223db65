"""Shim: estimator names live in :mod:`rllm.config.names` (the config layer, below the estimators)."""

from rllm.config.names import EstimatorName, estimator_name, rLLMAdvantageEstimator

__all__ = ["EstimatorName", "estimator_name", "rLLMAdvantageEstimator"]
