"""Run configuration: the schema, the layered OmegaConf loader and the algorithm settings.

The loader (and omegaconf with it) is imported on first use of its names, so that using
``AlgorithmConfig`` costs no omegaconf.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from rllm.config.algorithm import AlgorithmConfig, EstimatorName, estimator_name, rLLMAdvantageEstimator
from rllm.config.dotted import nest_dotted
from rllm.config.schema import CORE_KEYS, ConfigKey, Schema
from rllm.contract.sampling import TEMPERATURE_KEY, TOP_P_KEY

_LOADER_NAMES = (
    "CONFIG_FILE",
    "check_expansion",
    "check_keys",
    "current_schema",
    "default_config",
    "is_override",
    "load_config",
    "save_config",
    "validate_config",
)
_UNHONOURED_NAMES = ("switched_off", "unhonoured_keys")

__all__ = [
    "CONFIG_FILE",
    "CORE_KEYS",
    "TEMPERATURE_KEY",
    "TOP_P_KEY",
    "AlgorithmConfig",
    "ConfigKey",
    "EstimatorName",
    "Schema",
    "check_expansion",
    "check_keys",
    "current_schema",
    "default_config",
    "estimator_name",
    "is_override",
    "load_config",
    "nest_dotted",
    "rLLMAdvantageEstimator",
    "save_config",
    "switched_off",
    "unhonoured_keys",
    "validate_config",
]


def __getattr__(name: str) -> Any:
    if name in _LOADER_NAMES:
        return getattr(import_module("rllm.config.loading"), name)
    if name in _UNHONOURED_NAMES:
        return getattr(import_module("rllm.config.unhonoured"), name)
    raise AttributeError(f"module 'rllm.config' has no attribute {name!r}")


if TYPE_CHECKING:
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
    from rllm.config.unhonoured import switched_off, unhonoured_keys
