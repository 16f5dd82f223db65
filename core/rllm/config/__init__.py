"""Run configuration: the schema, the layered OmegaConf loader and the algorithm settings."""

from rllm.config.algorithm import AlgorithmConfig, EstimatorName, estimator_name, rLLMAdvantageEstimator
from rllm.config.loading import (
    CONFIG_FILE,
    check_keys,
    current_schema,
    default_config,
    is_override,
    load_config,
    save_config,
    validate_config,
)
from rllm.config.schema import CORE_KEYS, ConfigKey, Schema

__all__ = [
    "CONFIG_FILE",
    "CORE_KEYS",
    "AlgorithmConfig",
    "ConfigKey",
    "EstimatorName",
    "Schema",
    "check_keys",
    "current_schema",
    "default_config",
    "estimator_name",
    "is_override",
    "load_config",
    "rLLMAdvantageEstimator",
    "save_config",
    "validate_config",
]
