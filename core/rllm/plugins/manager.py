"""The plugin manager: finds plugins (``rllm.estimators`` entry points), loads them on first use, keeps registries.

``import rllm`` only reads the entry-point metadata (:func:`discover_plugins`); plugin modules
are imported, and their hooks run, the first time a registry is needed
(:func:`get_plugin_manager`). So a plugin module may import any part of rllm, in any order.
The ``builtin`` entry point of the ``rllm`` distribution itself is the built-in tier: loaded
first, never blocked by the switches below, and the only claims a plugin must pass
``replace=True`` to take over. rllm's other entry points (``fast``) are ordinary plugins.

Loading never lets one broken plugin take rllm down: a plugin whose import raises (even
``SystemExit``), whose hooks raise, or that breaks the contract is recorded as failed,
rolled back, and reported with a :class:`PluginWarning` naming its entry point,
distribution and version. What a plugin prints while it loads goes to stderr, so rllm's own
stdout stays machine-readable. Environment switches:

``RLLM_DISABLE_PLUGIN_AUTOLOAD=1``
    load the built-in plugin only;
``RLLM_PLUGINS=a,b``
    load only these entry-point plugins (by entry-point or distribution name);
``RLLM_DISABLED_PLUGINS=a,b``
    never load these;
``RLLM_STRICT_PLUGINS=1``
    load every plugin, then raise one :class:`PluginsFailedError` listing every failure; the
    failed load leaves no manager behind, so the next call starts afresh.

:class:`PluginManager` is assembled from one part per job: ``rllm.plugins.loading``
(entry points, claims made while a plugin's module is imported), ``rllm.plugins.registration``
(running hooks, checking and rolling back entries; the ``register`` callables are in
``rllm.plugins.registrars``) and :mod:`rllm.plugins.reporting` (:class:`PluginInfo`,
warnings, failures, the switches above). This module holds the process-wide manager.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import pluggy

from rllm.errors import PluginError
from rllm.plugins import hookspecs
from rllm.plugins.discovery import Discovered, Source
from rllm.plugins.hook_kinds import CONFIG_SECTIONS, HOOK_KIND, HookKind
from rllm.plugins.loading import LoadingMixin
from rllm.plugins.registration import HOOK_NAMES, Claim, RegistrationMixin
from rllm.plugins.registry import Entry, EstimatorEntry, LossEntry, Registry
from rllm.plugins.reporting import SLOW_PLUGIN_SECONDS, PluginInfo, PluginStatus, ReportingMixin, strict_from_env

__all__ = [
    "HOOK_NAMES",
    "SLOW_PLUGIN_SECONDS",
    "Claim",
    "PluginInfo",
    "PluginManager",
    "PluginStatus",
    "get_plugin_manager",
    "strict_from_env",
]


class PluginManager(LoadingMixin, RegistrationMixin, ReportingMixin):
    """The registries of every hook kind (estimators, ..., config sections, trackers) and the plugins that filled them.

    ``strict`` (None: read ``RLLM_STRICT_PLUGINS`` when a failure happens) makes failures
    errors: :meth:`load` raises one :class:`PluginsFailedError` after trying every plugin,
    and :meth:`register` outside a load raises the plugin's own error.
    """

    def __init__(self, strict: bool | None = None) -> None:
        self.hooks = pluggy.PluginManager(hookspecs.PROJECT_NAME)
        self.hooks.add_hookspecs(hookspecs)
        self.estimators: Registry[EstimatorEntry] = self._registry(HOOK_KIND["estimators"])
        self.grouping_hooks: Registry[Entry] = self._registry(HOOK_KIND["grouping_hooks"])
        self.backends: Registry[Entry] = self._registry(HOOK_KIND["backends"])
        self.kernels: Registry[Entry] = self._registry(HOOK_KIND["kernels"])
        self.batch_fields: Registry[Entry] = self._registry(HOOK_KIND["batch_fields"])
        self.losses: Registry[LossEntry] = self._registry(HOOK_KIND["losses"])
        self.config_sections: Registry[Entry] = self._registry(CONFIG_SECTIONS)
        self.weight_syncs: Registry[Entry] = self._registry(HOOK_KIND["weight_syncs"])
        self.trackers: Registry[Entry] = self._registry(HOOK_KIND["trackers"])
        self.plugins: dict[str, PluginInfo] = {}
        self.failures: list[PluginError] = []
        self.strict = strict
        self._loading = False
        self._importing: Source | None = None
        self._running: Source | None = None
        self._pending: dict[str, Discovered] = {}
        self._registered_on_import: dict[str, list[str]] = {}
        self._claims_on_import: dict[Source, list[Claim]] = {}

    def _registry(self, kind: HookKind) -> Registry[Any]:
        return Registry(kind.what, kind.not_found, kind.conflict, self.why_missing)


_manager: PluginManager | None = None
_loading: PluginManager | None = None
_lock = threading.RLock()


def _reset_lock_in_child() -> None:
    """A forked child starts with a fresh lock: the thread holding the parent's (loading plugins) is not copied."""
    global _lock, _loading
    _lock = threading.RLock()
    _loading = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_lock_in_child)


def get_plugin_manager(*, strict: bool | None = None) -> PluginManager:
    """The process-wide manager; the first call imports the plugins and runs their hooks.

    ``strict`` overrides ``RLLM_STRICT_PLUGINS`` for that first load (``rllm plugins`` loads
    with ``strict=False`` so that it can always report). A strict load that fails raises and
    keeps nothing, so a later call loads afresh. A plugin that uses rllm while it loads gets
    the manager being filled.
    """
    global _manager, _loading
    if _manager is not None and not _manager._pending:
        return _manager
    with _lock:
        if _manager is not None:
            _manager.finish_pending()
            return _manager
        if _loading is not None:
            return _loading
        manager = _loading = PluginManager(strict=strict)
        try:
            manager.load()
        finally:
            _loading = None
        _manager = manager
        return manager
