"""rllm: pluggable advantage estimation for reinforcement learning of language models.

Importing rllm discovers installed plugins (``rllm.estimators`` entry points, the built-in
one included) and loads them on first use; see :mod:`rllm.plugins.manager` for the switches.
"""

from importlib import import_module
from typing import Any

from rllm.config import AlgorithmConfig, rLLMAdvantageEstimator
from rllm.errors import (
    ConfigError,
    DataError,
    EstimatorConflictError,
    EstimatorNotFoundError,
    EstimatorOutputError,
    GroupError,
    MissingInputError,
    PluginError,
    PluginLoadError,
    PluginWarning,
    RewardError,
    RLLMError,
    RLLMWarning,
)
from rllm.estimators import (
    AdvantageBatch,
    GroupLayout,
    Numerics,
    Ragged,
    collect_advantages,
    collect_reward_and_advantage_from_trajectory_groups,
    compute_advantages,
    get_estimator,
)
from rllm.estimators.list_api import get_rllm_adv_estimator, register_adv_estimator, register_rllm_adv_estimator
from rllm.plugins import discover_plugins, get_plugin_manager, hookimpl, hookspec
from rllm.types import Episode, Step, TerminationReason, Trajectory, TrajectoryGroup
from rllm.version import __version__

__all__ = [
    "AdvantageBatch",
    "AlgorithmConfig",
    "ConfigError",
    "DataError",
    "Episode",
    "EstimatorConflictError",
    "EstimatorNotFoundError",
    "EstimatorOutputError",
    "GroupError",
    "GroupLayout",
    "MissingInputError",
    "Numerics",
    "PluginError",
    "PluginLoadError",
    "PluginWarning",
    "RLLMError",
    "RLLMWarning",
    "Ragged",
    "RewardError",
    "Step",
    "TerminationReason",
    "Trajectory",
    "TrajectoryGroup",
    "__version__",
    "collect_advantages",
    "collect_reward_and_advantage_from_trajectory_groups",
    "compute_advantages",
    "default_config",
    "get_estimator",
    "get_plugin_manager",
    "get_rllm_adv_estimator",
    "hookimpl",
    "hookspec",
    "load_config",
    "rLLMAdvantageEstimator",
    "register_adv_estimator",
    "register_rllm_adv_estimator",
]


def __getattr__(name: str) -> Any:
    # The configuration loader pulls in omegaconf: load it when a run configuration is read.
    if name in ("default_config", "load_config"):
        return getattr(import_module("rllm.config.loading"), name)
    if name == "toolkit":
        return import_module("rllm.toolkit")
    raise AttributeError(f"module 'rllm' has no attribute {name!r}")


# Reads the entry-point metadata only; plugins are imported when a registry is first used
# (get_plugin_manager), so a plugin module may import rllm, and be imported, in any order.
discover_plugins()
