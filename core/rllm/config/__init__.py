"""Run configuration: the algorithm settings and the layered OmegaConf loader.

The loader (and omegaconf with it) is imported on first use of its names, so that
``import rllm`` stays cheap.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from rllm.config.algorithm import AlgorithmConfig, EstimatorName, estimator_name, rLLMAdvantageEstimator

_LOADER_NAMES = ("OPEN_KEYS", "check_keys", "default_config", "load_config", "register_open_key")

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


def __getattr__(name: str) -> Any:
    if name in _LOADER_NAMES:
        return getattr(import_module("rllm.config.loading"), name)
    raise AttributeError(f"module 'rllm.config' has no attribute {name!r}")
