"""rllm: pluggable advantage estimation for reinforcement learning of language models.

Importing rllm discovers installed plugins (``rllm.estimators`` entry points, the built-in
one included) and nothing more: every name below, and the plugins, load on first use, so a
plugin module may import rllm, and be imported, in any order. See :mod:`rllm.plugins.manager`
for the switches.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from rllm.plugins.discovery import discover_plugins
from rllm.version import __version__

_EXPORTS: dict[str, str] = {
    "AlgorithmConfig": "rllm.config.algorithm",
    "rLLMAdvantageEstimator": "rllm.config.names",
    "default_config": "rllm.config.loading",
    "load_config": "rllm.config.loading",
    "BackendNotFoundError": "rllm.errors",
    "ConfigError": "rllm.errors",
    "DataError": "rllm.errors",
    "EstimatorConflictError": "rllm.errors",
    "EstimatorFailedError": "rllm.errors",
    "EstimatorNotFoundError": "rllm.errors",
    "EstimatorOptionError": "rllm.errors",
    "EstimatorOutputError": "rllm.errors",
    "GroupError": "rllm.errors",
    "MissingInputError": "rllm.errors",
    "NameNotFoundError": "rllm.errors",
    "PluginContractError": "rllm.errors",
    "PluginError": "rllm.errors",
    "PluginHookError": "rllm.errors",
    "PluginLoadError": "rllm.errors",
    "PluginWarning": "rllm.errors",
    "PluginsFailedError": "rllm.errors",
    "RewardError": "rllm.errors",
    "RLLMError": "rllm.errors",
    "RLLMWarning": "rllm.errors",
    "AdvantageBatch": "rllm.estimators.batch",
    "GroupLayout": "rllm.estimators.layout",
    "Ragged": "rllm.estimators.ragged",
    "Numerics": "rllm.estimators.numerics",
    "collect_advantages": "rllm.estimators.collect",
    "collect_reward_and_advantage_from_trajectory_groups": "rllm.estimators.collect",
    "compute_advantages": "rllm.estimators.compute",
    "get_estimator": "rllm.estimators.compute",
    "get_rllm_adv_estimator": "rllm.estimators.list_api",
    "register_adv_estimator": "rllm.estimators.list_api",
    "register_rllm_adv_estimator": "rllm.estimators.list_api",
    "get_plugin_manager": "rllm.plugins.manager",
    "hookimpl": "rllm.plugins",
    "hookspec": "rllm.plugins",
    "Episode": "rllm.types",
    "Step": "rllm.types",
    "TerminationReason": "rllm.types",
    "Trajectory": "rllm.types",
    "TrajectoryGroup": "rllm.types",
}
_SUBMODULES = ("toolkit", "plugins", "estimators", "config", "trainer", "types", "errors")

__all__ = [
    "AdvantageBatch",
    "AlgorithmConfig",
    "BackendNotFoundError",
    "ConfigError",
    "DataError",
    "Episode",
    "EstimatorConflictError",
    "EstimatorFailedError",
    "EstimatorNotFoundError",
    "EstimatorOptionError",
    "EstimatorOutputError",
    "GroupError",
    "GroupLayout",
    "MissingInputError",
    "NameNotFoundError",
    "Numerics",
    "PluginContractError",
    "PluginError",
    "PluginHookError",
    "PluginLoadError",
    "PluginWarning",
    "PluginsFailedError",
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
    if name in _EXPORTS:
        value = getattr(import_module(_EXPORTS[name]), name)
    elif name in _SUBMODULES:
        value = import_module(f"rllm.{name}")
    else:
        raise AttributeError(f"module 'rllm' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*__all__, *_SUBMODULES])


if TYPE_CHECKING:
    from rllm.config.algorithm import AlgorithmConfig
    from rllm.config.loading import default_config, load_config
    from rllm.config.names import rLLMAdvantageEstimator
    from rllm.errors import (
        BackendNotFoundError,
        ConfigError,
        DataError,
        EstimatorConflictError,
        EstimatorFailedError,
        EstimatorNotFoundError,
        EstimatorOptionError,
        EstimatorOutputError,
        GroupError,
        MissingInputError,
        NameNotFoundError,
        PluginContractError,
        PluginError,
        PluginHookError,
        PluginLoadError,
        PluginsFailedError,
        PluginWarning,
        RewardError,
        RLLMError,
        RLLMWarning,
    )
    from rllm.estimators.batch import AdvantageBatch
    from rllm.estimators.collect import collect_advantages, collect_reward_and_advantage_from_trajectory_groups
    from rllm.estimators.compute import compute_advantages, get_estimator
    from rllm.estimators.layout import GroupLayout
    from rllm.estimators.list_api import get_rllm_adv_estimator, register_adv_estimator, register_rllm_adv_estimator
    from rllm.estimators.numerics import Numerics
    from rllm.estimators.ragged import Ragged
    from rllm.plugins import hookimpl, hookspec
    from rllm.plugins.manager import get_plugin_manager
    from rllm.types import Episode, Step, TerminationReason, Trajectory, TrajectoryGroup

discover_plugins()
