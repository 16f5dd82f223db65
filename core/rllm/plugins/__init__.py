"""The plugin system: hook specifications, the manager that loads plugins, and the registries."""

from rllm.plugins.hookspecs import ENTRY_POINT_GROUP, EstimatorRegistrar, NamedRegistrar, hookimpl, hookspec
from rllm.plugins.manager import PluginInfo, PluginManager, discover_plugins, get_plugin_manager
from rllm.plugins.registry import Entry, EstimatorEntry, Registry, Source

__all__ = [
    "ENTRY_POINT_GROUP",
    "Entry",
    "EstimatorEntry",
    "EstimatorRegistrar",
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
