"""The hooks a plugin implements. This module is the plugin author's reference.

A plugin is any module or object with functions marked ``@rllm.hookimpl`` whose names are
the hooks below. Publish it under the ``rllm.estimators`` entry-point group::

    # pyproject.toml of your distribution
    [project.entry-points."rllm.estimators"]
    my_plugin = "my_package.plugin"

    # my_package/plugin.py
    import numpy as np
    import rllm

    def centred(rewards: list[np.ndarray], **kwargs) -> tuple[list[np.ndarray], list[np.ndarray]]:
        advantages = [group - group.mean() for group in rewards]
        return advantages, advantages

    @rllm.hookimpl
    def rllm_register_estimators(register):
        register("centred", centred)

Each hook receives a ``register`` callable bound to your plugin, so every entry is
attributed to it in ``rllm plugins`` and in error messages. Its type is the hook's own
Protocol (:class:`EstimatorRegistrar`, :class:`GroupingHookRegistrar`,
:class:`BackendRegistrar`, :class:`KernelRegistrar`, :class:`BatchFieldRegistrar`,
:class:`LossRegistrar`, :class:`ConfigSectionRegistrar`, :class:`WeightSyncRegistrar`,
:class:`TrackerRegistrar`, all in ``rllm.plugins``), for
annotating your hooks; the ``register`` rllm passes has exactly that signature. An
implementation may accept fewer arguments than the spec lists (pluggy passes only those
it names), so hooks can grow new arguments without breaking plugins.

rllm calls each plugin's hooks once, when a registry is first used (``import rllm`` only
discovers the entry points). The hookimpl options ``wrapper``, ``hookwrapper``,
``tryfirst`` and ``trylast`` have no meaning for registration hooks and are refused, as is a
hook name rllm does not define. What ``register`` receives is checked (see each hook), and
so is the call itself (an unknown keyword or a missing argument); a refusal names your
plugin and fails the whole plugin, so nothing half-registered stays.

The hooks are written by family, each importable here: advantage estimation
(``rllm.plugins.advantage_hooks``), training (``rllm.plugins.training_hooks``) and
configuration (``rllm.plugins.config_hooks``); the markers are in ``rllm.plugins.markers``.
"""

from __future__ import annotations

from rllm.contract.fields import OPTIONAL_FIELDS
from rllm.contract.names import (
    BACKEND_ABSTRACT_METHODS,
    BACKEND_METHODS,
    KERNEL_NAMES,
    LOSS_AGG_MODES,
    REFUSED_HOOKIMPL_OPTIONS,
    EstimatorStyle,
)
from rllm.plugins.advantage_hooks import (
    rllm_register_batch_fields,
    rllm_register_estimators,
    rllm_register_grouping_hooks,
    rllm_register_kernels,
)
from rllm.plugins.config_hooks import rllm_register_config_sections
from rllm.plugins.markers import PROJECT_NAME, hookimpl, hookspec
from rllm.plugins.protocols import (
    BackendRegistrar,
    BatchFieldRegistrar,
    ConfigSectionRegistrar,
    EstimatorRegistrar,
    GroupingHookRegistrar,
    KernelRegistrar,
    LossRegistrar,
    NamedRegistrar,
    TrackerRegistrar,
    WeightSyncRegistrar,
)
from rllm.plugins.training_hooks import (
    rllm_register_backends,
    rllm_register_losses,
    rllm_register_trackers,
    rllm_register_weight_syncs,
)

__all__ = [  # the words are rllm.contract's, the Protocols rllm.plugins.protocols', importable here as before
    "BACKEND_ABSTRACT_METHODS",
    "BACKEND_METHODS",
    "KERNEL_NAMES",
    "LOSS_AGG_MODES",
    "OPTIONAL_FIELDS",
    "PROJECT_NAME",
    "REFUSED_HOOKIMPL_OPTIONS",
    "BackendRegistrar",
    "BatchFieldRegistrar",
    "ConfigSectionRegistrar",
    "EstimatorRegistrar",
    "EstimatorStyle",
    "GroupingHookRegistrar",
    "KernelRegistrar",
    "LossRegistrar",
    "NamedRegistrar",
    "TrackerRegistrar",
    "WeightSyncRegistrar",
    "hookimpl",
    "hookspec",
    "rllm_register_backends",
    "rllm_register_batch_fields",
    "rllm_register_config_sections",
    "rllm_register_estimators",
    "rllm_register_grouping_hooks",
    "rllm_register_kernels",
    "rllm_register_losses",
    "rllm_register_trackers",
    "rllm_register_weight_syncs",
]
