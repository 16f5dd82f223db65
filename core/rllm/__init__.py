"""rllm: pluggable advantage estimation for reinforcement learning of language models.

Importing rllm discovers installed plugins (``rllm.estimators`` entry points, the built-in
one included) and nothing more: every name imported under ``TYPE_CHECKING`` below (the one
list of them, see :mod:`rllm.exports`), and the plugins, load on first use, so a
plugin module may import rllm, and be imported, in any order. See :mod:`rllm.plugins.manager`
for the switches.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rllm.exports import lazy_exports
from rllm.plugins.discovery import discover_plugins
from rllm.version import __version__

_SUBMODULES = ("toolkit", "plugins", "estimators", "config", "trainer", "types", "errors")

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

_EXPORTS, __getattr__ = lazy_exports(globals(), _SUBMODULES)
__all__ = sorted([*_EXPORTS, "__version__"])


def __dir__() -> list[str]:
    return sorted([*__all__, *_SUBMODULES])


discover_plugins()
