"""One exception hierarchy for everything rllm reports to its users.

Every error derives from :class:`RLLMError`; those caused by bad input also derive from
:class:`ValueError`, so code that catches ``ValueError`` (as the documented API raised) keeps working.
Messages name the culprit (estimator, plugin, distribution, group, trajectory, key) and
say what to do about it.
"""

from __future__ import annotations


class RLLMError(Exception):
    """Base class of every error raised by rllm."""


class RLLMWarning(UserWarning):
    """Base class of every warning emitted by rllm."""


class RLLMDeprecationWarning(RLLMWarning):
    """A deprecated key or value in the user's config: shown by default, unlike Python's DeprecationWarning."""


class PluginWarning(RLLMWarning):
    """A plugin failed to load or was ignored; rllm keeps working without it."""


class ConfigError(RLLMError, ValueError):
    """A configuration key or value is invalid."""


class EstimatorOptionError(ConfigError):
    """An estimator option is unknown to that estimator, or of the wrong type or value."""


class PluginError(RLLMError):
    """A plugin could not be loaded or registered something invalid."""


class PluginLoadError(PluginError, ImportError):
    """A plugin's entry point failed to import (raised only in strict mode)."""


class NameNotFoundError(RLLMError, ValueError):
    """Nothing of the requested kind (estimator, backend, ...) is registered under the requested name."""


class EstimatorNotFoundError(NameNotFoundError):
    """No estimator is registered under the requested name."""


class NameConflictError(PluginError, ValueError):
    """Two plugins registered the same name of one kind, or user code re-registered a taken name."""


class EstimatorConflictError(NameConflictError):
    """Two plugins registered the same estimator name, or a name was re-registered."""


class EstimatorOutputError(RLLMError, ValueError):
    """An estimator returned advantages of the wrong shape or with non-finite values."""


class EstimatorFailedError(RLLMError):
    """An estimator raised an exception of its own (or wrote into its read-only inputs)."""


class MissingInputError(RLLMError, ValueError):
    """An estimator needs an input field (lengths, values, ...) that the batch lacks."""


class RewardError(RLLMError, ValueError):
    """A trajectory reward is missing, NaN or infinite."""


class InputFieldError(RLLMError, ValueError):
    """A batch field beyond rewards (lengths, baselines, step values, a plugin's field) holds an unusable value."""


class GroupError(RLLMError, ValueError):
    """Rewards and group labels do not line up, or a group is unusable."""


class DataError(RLLMError, ValueError):
    """A data-model object (step, trajectory, episode) is inconsistent."""


class RolloutFileError(RLLMError, ValueError):
    """A rollout file line cannot be read; the message names the line."""


class WorkflowError(RLLMError):
    """A workflow failed and the failure policy stops the run; ``details`` holds the workflow's traceback."""

    details: str = ""


class TrainerError(RLLMError):
    """The training loop cannot go on (a stage returned unusable data, a backend misbehaved)."""


class CheckpointError(TrainerError):
    """A checkpoint is missing, incomplete or belongs to a different run configuration."""


class RunDirError(TrainerError):
    """A run directory holds files rllm did not write, has an unusable name, or cannot be written."""


class RunDirLockedError(RunDirError):
    """Another process is training in the same run directory."""


class CorruptCheckpointError(CheckpointError):
    """A checkpoint's file is missing, truncated, altered, or of a format this rllm does not read."""


class PluginHookError(PluginError):
    """A plugin's registration hook raised (raised only in strict mode)."""


class PluginContractError(PluginError, ValueError):
    """A plugin broke the plugin contract; the message names the plugin and the rule.

    An unknown hook, a hookimpl option rllm does not honour, or a registration of the wrong
    kind of object (a backend missing protocol methods, a non-callable grouping hook or kernel).
    """


class PluginsFailedError(PluginError):
    """Strict mode: one or more plugins failed to load; ``failures`` holds one error per plugin."""

    def __init__(self, message: str, failures: list[PluginError]) -> None:
        super().__init__(message)
        self.failures = failures


class BackendNotFoundError(NameNotFoundError):
    """No training backend is registered under the requested name."""


class GroupingHookNotFoundError(NameNotFoundError):
    """No trajectory grouping hook is registered under the requested name."""


class KernelNotFoundError(NameNotFoundError):
    """No kernel is registered under the requested name."""


class BackendConflictError(NameConflictError):
    """Two plugins registered the same backend name, or a name was re-registered."""


class GroupingHookConflictError(NameConflictError):
    """Two plugins registered the same grouping-hook name, or a name was re-registered."""


class KernelConflictError(NameConflictError):
    """Two plugins registered the same kernel name, or a name was re-registered."""


class TrackerNotFoundError(NameNotFoundError):
    """No experiment tracker is registered under the requested name."""


class TrackerConflictError(NameConflictError):
    """Two plugins registered the same tracker name, or a name was re-registered."""


class TrackerError(RLLMError):
    """An experiment tracker cannot start: its package is missing, or its folder cannot be written."""


class UserCodeExit(RLLMError):
    """User code (a flow, workflow, evaluator or tracker) tried to end the process instead of raising an exception.

    ``how`` says what it did (``called sys.exit(0)``); the message adds that such code fails by raising.
    """

    def __init__(self, how: str) -> None:
        super().__init__(f"{how}; code run by rllm fails by raising an exception, it cannot end the training process")
        self.how = how


class EstimatorCallError(RLLMError, TypeError):
    """A list-API estimator function was called with arguments of neither rLLM calling convention."""


class OutputFileError(RLLMError, OSError):
    """An output file cannot be written; whatever was there before is left as it was."""


class BatchFieldNotFoundError(NameNotFoundError):
    """No plugin declares a batch field under the requested name."""


class BatchFieldConflictError(NameConflictError):
    """Two plugins declared the same batch field, or a name was re-registered."""


class LossNotFoundError(NameNotFoundError):
    """No policy loss is registered under the requested name."""


class LossConflictError(NameConflictError):
    """Two plugins registered the same policy-loss name (or alias), or a name was re-registered."""


class LossOptionError(ConfigError):
    """A policy-loss option, aggregation mode or KL kind is unknown or of the wrong type or value."""


class LossOutputError(RLLMError, ValueError):
    """A policy loss returned something other than a scalar (with a gradient) and a dict of numbers."""


class LossFailedError(RLLMError):
    """A policy loss raised an exception of its own."""


class WeightSyncNotFoundError(NameNotFoundError):
    """No weight sync is registered under the requested name."""


class WeightSyncConflictError(NameConflictError):
    """Two plugins registered the same weight-sync name, or a name was re-registered."""


class WeightSyncError(TrainerError):
    """An inference server refused or missed a weight update: the run stops before training on stale weights."""


class InferenceServerError(RLLMError):
    """An OpenAI-compatible server did not answer, refused a request, or answered without what training needs."""


class ConformanceError(RLLMError, AssertionError):
    """A plugin broke a contract that :mod:`rllm.testing` checks; the message names the property and the input."""


class EngineCallError(RLLMError, ValueError):
    """A rollout engine was given messages it cannot read, or answered with something that is not a ModelOutput."""


class ClassNotRegisteredError(NameNotFoundError, KeyError):
    """A name in ``rllm.trainer.env_agent_mappings`` resolves to no class: rLLM's own, not shipped, or unregistered."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class NotShippedError(RLLMError, ImportError):
    """A name rLLM defines at this import path is not part of rllm; the message says what to use instead."""


class UnsupportedVersionError(RLLMError, ImportError):
    """An optional dependency a bridge drives is installed at a version the bridge is not tested with."""
