"""Estimator names: the enum every backend understands, and plain strings for the rest."""

from __future__ import annotations

from enum import Enum

from rllm.errors import ConfigError


class rLLMAdvantageEstimator(str, Enum):
    """Names of the estimators every backend understands.

    Unknown values map to ``OTHER``; a custom estimator is therefore named by its plain
    string in :class:`AlgorithmConfig` (``from_config`` keeps that string).
    """

    GRPO = "grpo"
    REINFORCE = "reinforce"
    REINFORCE_PLUS_PLUS_BASELINE = "reinforce_plus_plus_baseline"
    PRPO = "prpo"
    RLOO = "rloo"
    OTHER = "other"

    @classmethod
    def _missing_(cls, value: object) -> rLLMAdvantageEstimator:
        return cls.OTHER


EstimatorName = rLLMAdvantageEstimator | str


def estimator_name(name: EstimatorName) -> str:
    """The registry key for an enum member or a plain string."""
    if isinstance(name, Enum):
        return str(name.value)
    if not isinstance(name, str):
        raise ConfigError(f"An estimator name must be a string, got {type(name).__name__}: {name!r}.")
    return name
