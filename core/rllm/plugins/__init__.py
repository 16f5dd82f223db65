"""The plugin system: hook specifications, the manager that loads plugins, and the registries.

Names load on first use: ``import rllm`` needs only :mod:`rllm.plugins.discovery`.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "ENTRY_POINT_GROUP": "rllm.plugins.discovery",
    "Source": "rllm.plugins.discovery",
    "discover_plugins": "rllm.plugins.discovery",
    "BackendRegistrar": "rllm.plugins.hookspecs",
    "BatchFieldRegistrar": "rllm.plugins.hookspecs",
    "ConfigSectionRegistrar": "rllm.plugins.hookspecs",
    "EstimatorRegistrar": "rllm.plugins.hookspecs",
    "GroupingHookRegistrar": "rllm.plugins.hookspecs",
    "KernelRegistrar": "rllm.plugins.hookspecs",
    "LossRegistrar": "rllm.plugins.hookspecs",
    "NamedRegistrar": "rllm.plugins.hookspecs",
    "hookimpl": "rllm.plugins.hookspecs",
    "hookspec": "rllm.plugins.hookspecs",
    "PluginInfo": "rllm.plugins.manager",
    "PluginManager": "rllm.plugins.manager",
    "get_plugin_manager": "rllm.plugins.manager",
    "Entry": "rllm.plugins.registry",
    "EstimatorEntry": "rllm.plugins.registry",
    "LossEntry": "rllm.plugins.registry",
    "Registry": "rllm.plugins.registry",
}

__all__ = [
    "ENTRY_POINT_GROUP",
    "BackendRegistrar",
    "BatchFieldRegistrar",
    "ConfigSectionRegistrar",
    "Entry",
    "EstimatorEntry",
    "EstimatorRegistrar",
    "GroupingHookRegistrar",
    "KernelRegistrar",
    "LossEntry",
    "LossRegistrar",
    "NamedRegistrar",
    "PluginInfo",
    "PluginManager",
    "Registry",
    "Source",
    "discover_plugins",
    "get_plugin_manager",
    "hookimpl",
    "hookspec",
]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'rllm.plugins' has no attribute {name!r}")
    value = getattr(import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


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
        hookimpl,
        hookspec,
    )
    from rllm.plugins.manager import PluginInfo, PluginManager, get_plugin_manager
    from rllm.plugins.registry import Entry, EstimatorEntry, LossEntry, Registry
