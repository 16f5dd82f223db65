"""Finds plugins (``rllm.estimators`` entry points), loads them on first use, and keeps their registries.

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
"""

from __future__ import annotations

import contextlib
import difflib
import os
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from types import FrameType
from typing import Any, Literal

import pluggy

from rllm.errors import (
    PluginContractError,
    PluginError,
    PluginHookError,
    PluginLoadError,
    PluginsFailedError,
    PluginWarning,
    RLLMError,
)
from rllm.plugins import hookspecs
from rllm.plugins.contract import HOOK_KINDS, HookKind
from rllm.plugins.discovery import (
    BUILTIN_DISTRIBUTION,
    ENTRY_POINT_GROUP,
    Discovered,
    _normalise,
    discover_plugins,
)
from rllm.plugins.registry import Entry, EstimatorEntry, LossEntry, Registry, Source

if sys.version_info >= (3, 12):
    pass
else:  # pragma: no cover - exercised on older interpreters
    pass

PluginStatus = Literal["ok", "failed", "blocked", "conflict"]
Claim = tuple[str, Callable[..., Any], dict[str, Any]]
"""An estimator registered by decorator while its plugin's module was imported: name, function, keywords."""
SLOW_PLUGIN_SECONDS = 0.5
"""A plugin whose import and hooks take longer than this is named as slow by ``rllm plugins``."""


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
    kernels: list[str] = field(default_factory=list)
    batch_fields: list[str] = field(default_factory=list)
    losses: list[str] = field(default_factory=list)
    load_seconds: float = 0.0

    @property
    def slow(self) -> bool:
        return self.load_seconds > SLOW_PLUGIN_SECONDS

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "load_seconds": round(self.load_seconds, 4), "slow": self.slow}


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


def _env_names(name: str) -> set[str] | None:
    raw = os.environ.get(name)
    if raw is None:
        return None
    return {_normalise(part.strip()) for part in raw.split(",") if part.strip()}


def strict_from_env() -> bool:
    """Whether ``RLLM_STRICT_PLUGINS`` asks for plugin failures to be errors."""
    return _env_flag("RLLM_STRICT_PLUGINS")


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """Plugin code runs with ``print`` going to stderr, so ``--json`` and JSONL output stay clean."""
    with contextlib.redirect_stdout(sys.stderr):
        yield


def _module_of(ep: Any) -> str:
    return str(getattr(ep, "module", None) or ep.value.partition(":")[0])


def _initializing(module: str) -> bool:
    """Whether ``module`` is being imported right now (it is in ``sys.modules`` but not finished)."""
    spec = getattr(sys.modules.get(module), "__spec__", None)
    return bool(getattr(spec, "_initializing", False))


_RLLM_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _warn(message: str) -> None:
    """A :class:`PluginWarning` attributed to the first caller outside rllm (``sys:1`` under the ``rllm`` command)."""
    level = 2
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_RLLM_DIR):
        level, frame = level + 1, frame.f_back
    warnings.warn(message, PluginWarning, stacklevel=level)


def _describe(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()


class PluginManager:
    """The registries of estimators, grouping hooks, backends and kernels, and the plugins that filled them.

    ``strict`` (None: read ``RLLM_STRICT_PLUGINS`` when a failure happens) makes failures
    errors: :meth:`load` raises one :class:`PluginsFailedError` after trying every plugin,
    and :meth:`register` outside a load raises the plugin's own error.
    """

    def __init__(self, strict: bool | None = None) -> None:
        self.hooks = pluggy.PluginManager(hookspecs.PROJECT_NAME)
        self.hooks.add_hookspecs(hookspecs)
        self.estimators: Registry[EstimatorEntry] = self._registry(HOOK_KINDS[0])
        self.grouping_hooks: Registry[Entry] = self._registry(HOOK_KINDS[1])
        self.backends: Registry[Entry] = self._registry(HOOK_KINDS[2])
        self.kernels: Registry[Entry] = self._registry(HOOK_KINDS[3])
        self.batch_fields: Registry[Entry] = self._registry(HOOK_KINDS[4])
        self.losses: Registry[LossEntry] = self._registry(HOOK_KINDS[5])
        self.plugins: dict[str, PluginInfo] = {}
        self.failures: list[PluginError] = []
        self.strict = strict
        self._loading = False
        self._importing: Source | None = None
        self._pending: dict[str, Discovered] = {}
        self._registered_on_import: dict[str, list[str]] = {}
        self._claims_on_import: dict[Source, list[Claim]] = {}

    @staticmethod
    def _registry(kind: HookKind) -> Registry[Any]:
        return Registry(kind.what, kind.not_found, kind.conflict)

    def registry(self, kind: HookKind) -> Registry[Any]:
        return getattr(self, kind.attribute)

    def is_strict(self) -> bool:
        return strict_from_env() if self.strict is None else self.strict

    # -- registration -----------------------------------------------------------------
    def register(self, plugin: object, source: Source, module: str | None = None) -> PluginInfo:
        """Register one plugin object and run its registration hooks, attributing every entry.

        A failure rolls the plugin back entirely (its hooks and every entry it made) and is
        reported; see the class docstring for strict mode.
        """
        if self.hooks.is_registered(plugin):
            return self.plugins[self.hooks.get_name(plugin) or source.plugin]
        started = time.perf_counter()
        info = PluginInfo(
            name=source.plugin,
            distribution=source.distribution,
            version=source.version,
            module=module or getattr(plugin, "__name__", type(plugin).__name__),
            estimators=self._registered_on_import.pop(source.plugin, []),
        )
        self.plugins[source.plugin] = info
        try:
            with _stdout_to_stderr():
                self._register_hooks(plugin, source, info)
        except PluginContractError as exc:
            self._roll_back(plugin, source, info)
            self._fail(info, PluginContractError, str(exc), exc)
        except (Exception, SystemExit) as exc:  # SystemExit from a plugin is its failure, not rllm's exit
            self._roll_back(plugin, source, info)
            self._fail(info, PluginHookError, f"its registration hook raised {_describe(exc)}", exc)
        info.load_seconds += time.perf_counter() - started
        return info

    def _register_hooks(self, plugin: object, source: Source, info: PluginInfo) -> None:
        self._refuse_hookimpl_options(plugin)
        try:
            self.hooks.register(plugin, name=source.plugin)
        except (ValueError, pluggy.PluginValidationError) as exc:
            raise PluginContractError(f"its hooks are invalid: {exc}") from exc
        callers = self.hooks.get_hookcallers(plugin) or []
        info.hooks = sorted(caller.name for caller in callers)
        unknown = [caller.name for caller in callers if caller.spec is None]
        if unknown or not (callers or info.estimators):
            known = [kind.hook for kind in HOOK_KINDS]
            hints = [
                f"{u!r} (did you mean {difflib.get_close_matches(u, known, n=1, cutoff=0)[0]!r}?)" for u in unknown
            ]
            reason = f"it defines unknown hooks {', '.join(hints)}" if unknown else "it implements no rllm hook"
            raise PluginContractError(f"{reason}; rllm's hooks are {', '.join(known)}")
        for kind in HOOK_KINDS:
            registrar = self._registrar(kind, source, getattr(info, kind.attribute))
            for impl in getattr(self.hooks.hook, kind.hook).get_hookimpls():
                if impl.plugin is plugin:
                    impl.function(**({"register": registrar} if "register" in impl.argnames else {}))

    def _refuse_hookimpl_options(self, plugin: object) -> None:
        """Registration hooks run once per plugin, outside pluggy's call loop: ordering and wrapping mean nothing."""
        for attribute in dir(plugin):
            options: dict[str, Any] = dict(self.hooks.parse_hookimpl_opts(plugin, attribute) or {})
            refused = [f"{option}=True" for option in hookspecs.REFUSED_HOOKIMPL_OPTIONS if options.get(option)]
            if refused:
                raise PluginContractError(
                    f"its hook {attribute} is marked @rllm.hookimpl({', '.join(refused)}), an option rllm does not "
                    "honour (each plugin's registration hooks run once, on their own); remove the option"
                )

    def _roll_back(self, plugin: object, source: Source, info: PluginInfo) -> None:
        if self.hooks.is_registered(plugin):
            self.hooks.unregister(plugin)
        self.forget(source)
        self.plugins[source.plugin] = info
        for kind in HOOK_KINDS:
            setattr(info, kind.attribute, [])

    def _registrar(self, kind: HookKind, source: Source, names: list[str]) -> Callable[..., None]:
        if kind.attribute == "losses":

            def register_loss(
                name: str, fn: Callable[..., Any] | str, *, replace: bool = False, **declaration: Any
            ) -> None:
                if not isinstance(name, str) or not name:
                    raise PluginContractError(f"{source.describe()} registered a loss with an invalid name {name!r}.")
                for entry in LossEntry.declare(name, fn, source, replace=replace, **declaration):
                    self.losses.add(entry)
                    names.append(entry.name)

            return register_loss
        if kind.problem is None:

            def register_estimator(
                name: str, fn: Callable[..., Any], *, replace: bool = False, **declaration: Any
            ) -> None:
                self.add_estimator(name, fn, source, replace=replace, **declaration)
                names.append(name)

            return register_estimator

        def register(name: str, target: Any, *, replace: bool = False) -> None:
            self.add(kind, name, target, source, replace=replace)
            names.append(name)

        return register

    def add_estimator(
        self, name: str, fn: Callable[..., Any], source: Source, *, replace: bool = False, **declaration: Any
    ) -> None:
        """Validate and record one estimator claim; ``declaration`` holds the fields of :class:`EstimatorEntry`."""
        who = source.describe()
        if not isinstance(name, str) or not name:
            raise PluginContractError(f"{who} registered an estimator with an invalid name {name!r}.")
        if not callable(fn):
            raise PluginContractError(f"{who} registered estimator {name!r} with a non-callable {fn!r}.")
        self.estimators.add(EstimatorEntry.declare(name, fn, source, replace=replace, **declaration))
        if source in self._claims_on_import:  # a decorator run while the plugin's module was imported
            self._registered_on_import.setdefault(source.plugin, []).append(name)
            self._claims_on_import[source].append((name, fn, {"replace": replace, **declaration}))

    def add(self, kind: HookKind, name: str, target: Any, source: Source, *, replace: bool = False) -> None:
        """Validate and record one grouping-hook, backend or kernel claim."""
        if not isinstance(name, str) or not name:
            raise PluginContractError(f"{source.describe()} registered a {kind.what} with an invalid name {name!r}.")
        problem = kind.problem(name, target) if kind.problem else None
        if problem:
            raise PluginContractError(f"{source.describe()} registered {kind.what} {name!r}, which {problem}.")
        self.registry(kind).add(Entry(name=name, target=target, source=source, replace=replace))

    def forget(self, source: Source) -> None:
        """Remove every claim of one source from every registry."""
        for kind in HOOK_KINDS:
            self.registry(kind).discard_source(source)

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

    def _fail(self, info: PluginInfo, error_type: type[PluginError], reason: str, cause: BaseException) -> None:
        where = f"distribution {info.distribution} {info.version}" if info.distribution else "no distribution"
        strict = self.is_strict()
        message = (
            f"rllm plugin {info.name!r} (module {info.module}, {where}) was not loaded: {reason}. "
            + ("" if strict else "rllm keeps working without it. ")
            + f"Fix or uninstall that distribution, or set RLLM_DISABLED_PLUGINS={info.name} to skip it"
            + ("." if strict else "; RLLM_STRICT_PLUGINS=1 makes this an error.")
        )
        info.status = "failed"
        info.error = f"{type(cause).__name__}: {cause}"
        error = error_type(message)
        error.__cause__ = cause
        self.failures.append(error)
        if not strict:
            _warn(message)
        elif not self._loading:
            raise error

    # -- entry points -------------------------------------------------------------------
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

    def warn_ignored(self) -> None:
        """Warn about every plugin claim on a built-in name made without ``replace=True`` (it never wins)."""
        for kind in HOOK_KINDS:
            registry = self.registry(kind)
            for entry in registry.ignored_claims():
                _warn(
                    f"{entry.source.describe()} registers {kind.what} {entry.name!r}, which is built in; "
                    f"{self._kept(registry, entry.name)}. To take the name over, plugin {entry.source.plugin!r} "
                    "must register it with replace=True."
                )

    @staticmethod
    def _kept(registry: Registry[Any], name: str) -> str:
        """Which claim is used instead of an ignored one."""
        try:
            winner = registry.resolve(name)
        except RLLMError:
            return "its version is ignored"
        if winner.source.kind == "builtin":
            return "the built-in is kept"
        return f"{winner.source.describe()} took it over with replace=True and is used"

    # -- reporting ----------------------------------------------------------------------
    def plugin_infos(self) -> list[PluginInfo]:
        """Every known plugin, built-ins first, with conflicts on the names it claims marked."""
        for info in self.plugins.values():
            if info.status != "ok":
                continue
            problems = []
            for kind in HOOK_KINDS:
                registry = self.registry(kind)
                for name in getattr(info, kind.attribute):
                    try:
                        winner = registry.resolve(name)
                    except RLLMError as exc:
                        problems.append(str(exc))
                        continue
                    mine = [c for c in registry.claims(name) if c.source.plugin == info.name]
                    ignored = any(c.source.kind == "plugin" and not c.replace for c in mine)
                    if ignored and winner.source.plugin != info.name and winner.source.kind != "runtime":
                        problems.append(
                            f"{kind.what} {name!r} is built in; the plugin's version is ignored "
                            f"because it did not register with replace=True ({self._kept(registry, name)})"
                        )
            if problems:
                info.status = "conflict"
                info.error = "; ".join(problems)
        builtin = {name for name, info in self.plugins.items() if info.distribution == BUILTIN_DISTRIBUTION}
        return sorted(self.plugins.values(), key=lambda info: (info.name not in builtin, info.name))


_CLAIMS_ON_IMPORT: dict[tuple[str, str], list[Claim]] = {}
"""Estimators each entry-point module registered by decorator while it was imported, for later managers."""

_manager: PluginManager | None = None
_loading: PluginManager | None = None
_lock = threading.RLock()


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
