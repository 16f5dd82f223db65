"""Run configuration: the algorithm settings and the layered OmegaConf loader."""

from rllm.config.algorithm import AlgorithmConfig, EstimatorName, estimator_name, rLLMAdvantageEstimator
from rllm.config.loading import OPEN_KEYS, check_keys, default_config, load_config, register_open_key

__all__ = [
    "OPEN_KEYS",
    "AlgorithmConfig",
    "EstimatorName",
    "check_keys",
    "default_config",
    "estimator_name",
    "load_config",
    "rLLMAdvantageEstimator",
    "register_open_key",
]
