"""The plugin system: hook specifications, the manager that loads plugins, and the registries.

Names load on first use (the ``TYPE_CHECKING`` imports below are the one list of them, see
:mod:`rllm.exports`): ``import rllm`` needs only :mod:`rllm.plugins.discovery`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rllm.exports import lazy_exports

if TYPE_CHECKING:
    from rllm.plugins.discovery import ENTRY_POINT_GROUP, Source, discover_plugins
    from rllm.plugins.hookspecs import (
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
        hookimpl,
        hookspec,
    )
    from rllm.plugins.manager import PluginInfo, PluginManager, get_plugin_manager
    from rllm.plugins.registry import Entry, EstimatorEntry, LossEntry, Registry

_EXPORTS, __getattr__ = lazy_exports(globals())
__all__ = sorted(_EXPORTS)
