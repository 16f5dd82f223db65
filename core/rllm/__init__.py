"""rllm: pluggable advantage estimation for reinforcement learning of language models.

Importing rllm registers the built-in estimators and discovers installed plugins
(``rllm.estimators`` entry points); see :mod:`rllm.plugins.manager` for the switches.
"""

from rllm.config import AlgorithmConfig, default_config, load_config, rLLMAdvantageEstimator
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
    collect_reward_and_advantage_from_trajectory_groups,
    compute_advantages,
    get_estimator,
)
from rllm.estimators.list_api import get_rllm_adv_estimator, register_adv_estimator, register_rllm_adv_estimator
from rllm.plugins import get_plugin_manager, hookimpl, hookspec
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

# Last, so that a plugin importing rllm while it loads sees every name above.
get_plugin_manager()
