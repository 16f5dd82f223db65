"""Loading plugins: importing the entry points the switches allow, and attributing what their modules register.

An entry point's module may register estimators by decorator while it is imported; those
claims belong to its plugin (:meth:`LoadingMixin.runtime_source`) and are remembered per
entry point, so a manager created after the module was first imported still gets them. A
module that is still being imported when the plugins load (it imported rllm, which then
loaded plugins) is loaded later, by :meth:`LoadingMixin.finish_pending`.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from rllm.errors import PluginLoadError, PluginsFailedError
from rllm.plugins.discovery import (
    BUILTIN_DISTRIBUTION,
    ENTRY_POINT_GROUP,
    Discovered,
    Source,
    _normalise,
    discover_plugins,
)
from rllm.plugins.registration import Claim, RegistrationMixin, _stdout_to_stderr
from rllm.plugins.reporting import PluginInfo, _describe, _env_flag, _env_names, _warn


def _module_of(ep: Any) -> str:
    return str(getattr(ep, "module", None) or ep.value.partition(":")[0])


def _initializing(module: str) -> bool:
    """Whether ``module`` is being imported right now (it is in ``sys.modules`` but not finished)."""
    spec = getattr(sys.modules.get(module), "__spec__", None)
    return bool(getattr(spec, "_initializing", False))


_CLAIMS_ON_IMPORT: dict[tuple[str, str], list[Claim]] = {}
"""Estimators each entry-point module registered by decorator while it was imported, for later managers."""


class LoadingMixin(RegistrationMixin):
    """The plugin manager's loading: import each allowed entry point, then register the plugin it names.

    The state it reads is created by :class:`rllm.plugins.manager.PluginManager`.
    """

    _pending: dict[str, Discovered]

    def load(self) -> None:
        """Load the built-in plugin, then every entry point the switches allow.

        In strict mode every plugin is tried first; then one :class:`PluginsFailedError`
        lists every failure.
        """
        self._loading = True
        try:
            discovered = discover_plugins()
            if not any(found.source.kind == "builtin" for found in discovered):
                _warn(
                    f"The {BUILTIN_DISTRIBUTION} distribution declares no {ENTRY_POINT_GROUP!r} entry point, "
                    "so the built-in estimators are missing: reinstall rllm (pip install -e . in a checkout)."
                )
            for found in discovered:
                reason = self._blocked(found)
                if reason:
                    ep, source = found.entry_point, found.source
                    self.plugins[source.plugin] = PluginInfo(
                        source.plugin, source.distribution, source.version, ep.value, status="blocked", error=reason
                    )
                elif _initializing(_module_of(found.entry_point)):  # it imported rllm, which is loading plugins
                    self._pending[_module_of(found.entry_point)] = found
                    self._claims_on_import[found.source] = []
                else:
                    self.load_entry_point(found.entry_point, found.source)
            self._check_loaded_requirements()
        finally:
            self._loading = False
        self.warn_ignored()
        if self.failures and self.is_strict():
            listing = "\n".join(f"  - {type(error).__name__}: {error}" for error in self.failures)
            raise PluginsFailedError(
                f"RLLM_STRICT_PLUGINS is set and {len(self.failures)} plugin(s) failed to load:\n{listing}",
                list(self.failures),
            )

    @staticmethod
    def _blocked(found: Discovered) -> str | None:
        if found.source.kind == "builtin":
            return None
        dist = found.source.distribution
        names = {_normalise(found.entry_point.name)} | ({_normalise(dist)} if dist else set())
        allow = _env_names("RLLM_PLUGINS")
        if _env_flag("RLLM_DISABLE_PLUGIN_AUTOLOAD"):
            return "RLLM_DISABLE_PLUGIN_AUTOLOAD is set"
        if allow is not None and not names & allow:
            return "not listed in RLLM_PLUGINS"
        if names & (_env_names("RLLM_DISABLED_PLUGINS") or set()):
            return "listed in RLLM_DISABLED_PLUGINS"
        return None

    def load_entry_point(self, ep: Any, source: Source) -> PluginInfo:
        """Import one entry point and register the plugin it names; the time both take is its load time."""
        started = time.perf_counter()
        plugin = self._import(ep, source)
        if plugin is None:
            info = self.plugins[source.plugin]
        elif self.hooks.is_registered(plugin):  # the same module reached through a second entry point
            return self.plugins[self.hooks.get_name(plugin) or source.plugin]
        else:
            info = self.register(plugin, source, module=ep.value)
        info.load_seconds = time.perf_counter() - started
        return info

    def finish_pending(self) -> None:
        """Load the plugins whose module was still being imported when the others loaded.

        That happens when code imports a plugin module first and the module uses rllm at its
        top (a registration decorator): its hooks and decorators are complete only afterwards.
        """
        for module, found in list(self._pending.items()):
            if not _initializing(module):
                del self._pending[module]
                self.load_entry_point(found.entry_point, found.source)
                self.warn_ignored()

    def _import(self, ep: Any, source: Source) -> object | None:
        fresh = _module_of(ep) not in sys.modules
        self._importing = source
        self._claims_on_import.setdefault(source, [])
        try:
            with _stdout_to_stderr():
                plugin = ep.load()
        except (Exception, SystemExit) as exc:  # SystemExit from a plugin is its failure, not rllm's exit
            self.forget(source)
            self._registered_on_import.pop(source.plugin, None)
            self._claims_on_import.pop(source, None)
            info = PluginInfo(source.plugin, source.distribution, source.version, ep.value)
            self.plugins[source.plugin] = info
            self._fail(info, PluginLoadError, f"importing {ep.value!r} raised {_describe(exc)}", exc)
            return None
        finally:
            self._importing = None
        key = (ep.name, ep.value)
        claims = self._claims_on_import.pop(source)
        if fresh or claims:
            _CLAIMS_ON_IMPORT[key] = claims
        else:  # imported before this manager existed: replay what its decorators registered then
            for name, fn, options in _CLAIMS_ON_IMPORT.get(key, []):
                self.add_estimator(name, fn, source, **options)
                self._registered_on_import.setdefault(source.plugin, []).append(name)
        return plugin

    def runtime_source(self, where: str) -> Source:
        """Attribution for a registration made by code rather than a hook (a decorator at ``where``).

        While a plugin's module is being imported, what it registers belongs to that plugin.
        """
        if self._importing:
            return self._importing
        for module, found in self._pending.items():
            if where.startswith(f"{module}."):
                return found.source
        return Source("runtime", where)
