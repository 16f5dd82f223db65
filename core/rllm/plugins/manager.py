"""Loads plugins (the built-in one, then ``rllm.estimators`` entry points) and keeps their registries.

Loading never lets one broken plugin take rllm down: a plugin that fails to import or
whose hooks raise is recorded as failed and reported with a :class:`PluginWarning` naming
its entry point, distribution and version (``RLLM_STRICT_PLUGINS=1`` turns that into
:class:`PluginLoadError`). Environment switches:

``RLLM_DISABLE_PLUGIN_AUTOLOAD=1``
    load the built-in plugin only;
``RLLM_PLUGINS=a,b``
    load only these entry-point plugins (by entry-point or distribution name);
``RLLM_DISABLED_PLUGINS=a,b``
    never load these;
``RLLM_STRICT_PLUGINS=1``
    a plugin that fails to load is an error instead of a warning.
"""

from __future__ import annotations

import difflib
import importlib
import os
import sys
import traceback
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import pluggy

from rllm.errors import PluginError, PluginLoadError, PluginWarning, RLLMError
from rllm.plugins import hookspecs
from rllm.plugins.options import Option, declare
from rllm.plugins.registry import Entry, EstimatorEntry, Registry, Source

if sys.version_info >= (3, 12):
    from importlib import metadata
else:  # pragma: no cover - exercised on older interpreters
    import importlib_metadata as metadata

PluginStatus = Literal["ok", "failed", "blocked", "conflict"]
BUILTIN_PLUGIN = "builtin"


@dataclass
class PluginInfo:
    """What ``rllm plugins`` reports about one plugin."""

    name: str
    distribution: str | None
    version: str | None
    module: str | None
    status: PluginStatus = "ok"
    error: str | None = None
    hooks: list[str] = field(default_factory=list)
    estimators: list[str] = field(default_factory=list)
    grouping_hooks: list[str] = field(default_factory=list)
    backends: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


def _env_names(name: str) -> set[str] | None:
    raw = os.environ.get(name)
    if raw is None:
        return None
    return {part.strip() for part in raw.split(",") if part.strip()}


def _normalise(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


class PluginManager:
    """The registries of estimators, grouping hooks and backends, and the plugins that filled them."""

    def __init__(self) -> None:
        self.hooks = pluggy.PluginManager(hookspecs.PROJECT_NAME)
        self.hooks.add_hookspecs(hookspecs)
        self.estimators: Registry[EstimatorEntry] = Registry("estimator")
        self.grouping_hooks: Registry[Entry] = Registry("grouping hook")
        self.backends: Registry[Entry] = Registry("backend")
        self.plugins: dict[str, PluginInfo] = {}
        self._importing: Source | None = None
        self._registered_on_import: dict[str, list[str]] = {}

    # -- registration -----------------------------------------------------------------
    def register(self, plugin: object, source: Source, module: str | None = None) -> PluginInfo:
        """Register one plugin object and run its registration hooks, attributing every entry."""
        if self.hooks.is_registered(plugin):
            return self.plugins[self.hooks.get_name(plugin) or source.plugin]
        info = PluginInfo(
            name=source.plugin,
            distribution=source.distribution,
            version=source.version,
            module=module or getattr(plugin, "__name__", type(plugin).__name__),
            estimators=self._registered_on_import.pop(source.plugin, []),
        )
        self.plugins[source.plugin] = info
        try:
            self.hooks.register(plugin, name=source.plugin)
        except (ValueError, pluggy.PluginValidationError) as exc:
            self._fail(info, f"its hooks are invalid: {exc}", exc)
            return info
        callers = self.hooks.get_hookcallers(plugin) or []
        info.hooks = sorted(caller.name for caller in callers)
        unknown = [caller.name for caller in callers if caller.spec is None]
        if unknown or not (callers or info.estimators):
            self.hooks.unregister(plugin)
            self.forget(source)
            info.estimators = []
            known = [name for name in dir(hookspecs) if name.startswith("rllm_register_")]
            hints = [
                f"{u!r} (did you mean {difflib.get_close_matches(u, known, n=1, cutoff=0)[0]!r}?)" for u in unknown
            ]
            reason = f"it defines unknown hooks {', '.join(hints)}" if unknown else "it implements no rllm hook"
            self._fail(info, f"{reason}; rllm's hooks are {', '.join(known)}", PluginError(reason))
            return info
        try:
            self._run_registration_hooks(plugin, source, info)
        except Exception as exc:
            self.forget(source)
            self.hooks.unregister(plugin)
            self.plugins[source.plugin] = info
            info.estimators, info.grouping_hooks, info.backends = [], [], []
            self._fail(info, f"its registration hook raised {type(exc).__name__}: {exc}", exc)
        return info

    def _run_registration_hooks(self, plugin: object, source: Source, info: PluginInfo) -> None:
        targets: list[tuple[str, Callable[..., None]]] = [
            ("rllm_register_estimators", self._estimator_registrar(source, info.estimators)),
            ("rllm_register_grouping_hooks", self._named_registrar(self.grouping_hooks, source, info.grouping_hooks)),
            ("rllm_register_backends", self._named_registrar(self.backends, source, info.backends)),
        ]
        for hook_name, registrar in targets:
            for impl in getattr(self.hooks.hook, hook_name).get_hookimpls():
                if impl.plugin is plugin:
                    impl.function(**({"register": registrar} if "register" in impl.argnames else {}))

    def _estimator_registrar(self, source: Source, names: list[str]) -> hookspecs.EstimatorRegistrar:
        def register(
            name: str,
            fn: Callable[..., Any],
            *,
            style: hookspecs.EstimatorStyle = "grouped",
            requires: Sequence[str] = (),
            options: Sequence[Option] | None = None,
            numerics: bool | str = False,
            replace: bool = False,
        ) -> None:
            self.add_estimator(
                name, fn, source, style=style, requires=requires, options=options, numerics=numerics, replace=replace
            )
            names.append(str(name))

        return register

    def _named_registrar(self, registry: Registry[Entry], source: Source, names: list[str]) -> hookspecs.NamedRegistrar:
        def register(name: str, target: Any, *, replace: bool = False) -> None:
            if not isinstance(name, str) or not name:
                raise PluginError(f"{source.describe()} registered a {registry.what} with an invalid name {name!r}.")
            registry.add(Entry(name=name, target=target, source=source, replace=replace))
            names.append(name)

        return register

    def add_estimator(
        self,
        name: str,
        fn: Callable[..., Any],
        source: Source,
        *,
        style: str = "grouped",
        requires: Iterable[str] = (),
        options: Sequence[Option] | None = None,
        numerics: bool | str = False,
        replace: bool = False,
    ) -> None:
        """Validate and record one estimator claim."""
        who = source.describe()
        if not isinstance(name, str) or not name:
            raise PluginError(f"{who} registered an estimator with an invalid name {name!r}.")
        if not callable(fn):
            raise PluginError(f"{who} registered estimator {name!r} with a non-callable {fn!r}.")
        if style not in ("grouped", "batch"):
            raise PluginError(f"{who} registered estimator {name!r} with style {style!r}; use 'grouped' or 'batch'.")
        requires = tuple(requires)
        unknown = [f for f in requires if f not in hookspecs.OPTIONAL_FIELDS]
        if unknown:
            raise PluginError(
                f"{who} registered estimator {name!r} requiring unknown batch fields {unknown}; "
                f"known fields: {', '.join(hookspecs.OPTIONAL_FIELDS)}."
            )
        try:
            declaration = declare(fn, options, numerics if isinstance(numerics, str) else bool(numerics))
        except TypeError as exc:
            raise PluginError(f"{who} registered estimator {name!r} with invalid options: {exc}.") from None
        entry = EstimatorEntry(
            name=name,
            target=fn,
            source=source,
            replace=replace,
            style=style,  # type: ignore[arg-type]
            requires=requires,
            declaration=declaration,
        )
        self.estimators.add(entry)
        if source == self._importing:  # a decorator run while the plugin's module was imported
            self._registered_on_import.setdefault(source.plugin, []).append(name)

    def forget(self, source: Source) -> None:
        for registry in (self.estimators, self.grouping_hooks, self.backends):
            registry.discard_source(source)  # type: ignore[arg-type]

    def runtime_source(self, where: str) -> Source:
        """Attribution for a registration made by code rather than a hook (a decorator)."""
        return self._importing or Source("runtime", where)

    def _fail(self, info: PluginInfo, reason: str, exc: BaseException) -> None:
        where = f"distribution {info.distribution} {info.version}" if info.distribution else "no distribution"
        message = (
            f"rllm plugin {info.name!r} (module {info.module}, {where}) was not loaded: {reason}. "
            f"rllm keeps working without it. Fix or uninstall that distribution, or set "
            f"RLLM_DISABLED_PLUGINS={info.name} to skip it; RLLM_STRICT_PLUGINS=1 makes this an error."
        )
        info.status = "failed"
        info.error = f"{type(exc).__name__}: {exc}"
        if _env_flag("RLLM_STRICT_PLUGINS"):
            raise PluginLoadError(message) from exc
        warnings.warn(message, PluginWarning, stacklevel=2)

    # -- entry points -------------------------------------------------------------------
    def load_entry_points(self) -> None:
        """Import and register every ``rllm.estimators`` entry point the environment allows."""
        autoload = not _env_flag("RLLM_DISABLE_PLUGIN_AUTOLOAD")
        allow = _env_names("RLLM_PLUGINS")
        block = _env_names("RLLM_DISABLED_PLUGINS") or set()
        seen: dict[tuple[str, str], object] = {}
        for ep in metadata.entry_points(group=hookspecs.ENTRY_POINT_GROUP):
            dist = getattr(ep, "dist", None)
            dist_name = dist.metadata["Name"] if dist is not None else None
            version = dist.version if dist is not None else None
            key = (ep.name, ep.value)
            if key in seen:
                continue
            names = {_normalise(ep.name)} | ({_normalise(dist_name)} if dist_name else set())
            plugin_name = ep.name if ep.name not in self.plugins else f"{ep.name}@{dist_name}"
            source = Source("plugin", plugin_name, dist_name, version)
            reason = None
            if not autoload:
                reason = "RLLM_DISABLE_PLUGIN_AUTOLOAD is set"
            elif allow is not None and not names & {_normalise(n) for n in allow}:
                reason = "not listed in RLLM_PLUGINS"
            elif names & {_normalise(n) for n in block}:
                reason = "listed in RLLM_DISABLED_PLUGINS"
            if reason:
                self.plugins[plugin_name] = PluginInfo(
                    plugin_name, dist_name, version, ep.value, status="blocked", error=reason
                )
                continue
            plugin = self._import(ep, source)
            if plugin is None:
                continue
            seen[key] = plugin
            if self.hooks.is_registered(plugin):
                continue  # the same plugin reached through a second copy of its distribution
            self.register(plugin, source, module=ep.value)

    def _import(self, ep: Any, source: Source) -> object | None:
        self._importing = source
        try:
            return ep.load()
        except Exception as exc:
            self.forget(source)
            info = PluginInfo(source.plugin, source.distribution, source.version, ep.value)
            self.plugins[source.plugin] = info
            detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            self._fail(info, f"importing {ep.value!r} raised {detail}", exc)
            return None
        finally:
            self._importing = None

    # -- reporting ----------------------------------------------------------------------
    def plugin_infos(self) -> list[PluginInfo]:
        """Every known plugin, with conflicts on its estimator names marked."""
        for info in self.plugins.values():
            if info.status != "ok":
                continue
            problems = []
            for registry, names in (
                (self.estimators, info.estimators),
                (self.grouping_hooks, info.grouping_hooks),
                (self.backends, info.backends),
            ):
                for name in names:
                    try:
                        winner = registry.resolve(name)
                    except RLLMError as exc:
                        problems.append(str(exc))
                        continue
                    if winner.source.plugin != info.name and winner.source.kind == "builtin":
                        problems.append(
                            f"{registry.what} {name!r} is built in; the plugin's version is ignored "
                            "because it did not register with replace=True"
                        )
            if problems:
                info.status = "conflict"
                info.error = "; ".join(problems)
        return sorted(self.plugins.values(), key=lambda info: (info.name != BUILTIN_PLUGIN, info.name))


_manager: PluginManager | None = None


def get_plugin_manager() -> PluginManager:
    """The process-wide manager; the first call registers the built-ins and loads entry points."""
    global _manager
    if _manager is None:
        _manager = PluginManager()
        from rllm.version import __version__

        builtin_plugin = importlib.import_module("rllm_builtin.plugin")

        _manager.register(builtin_plugin, Source("builtin", BUILTIN_PLUGIN, "rllm", __version__))
        _manager.load_entry_points()
        _warn_ignored(_manager)
    return _manager


def _warn_ignored(manager: PluginManager) -> None:
    for entry in manager.estimators.ignored_claims():
        warnings.warn(
            f"{entry.source.describe()} registers estimator {entry.name!r}, which is built in; the built-in "
            "is kept. The plugin must register with replace=True to take the name over.",
            PluginWarning,
            stacklevel=3,
        )
