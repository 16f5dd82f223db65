"""Running one plugin's registration hooks: validating what it registers, and rolling it back when it fails.

A plugin is registered whole or not at all: a hook that raises, a hook rllm does not
define, or an object its ``register`` refuses undoes every entry the plugin made, and the
failure is reported (:mod:`rllm.plugins.reporting`). The ``register`` callable each hook
receives is built in :mod:`rllm.plugins.registrars`.
"""

from __future__ import annotations

import contextlib
import difflib
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pluggy

from rllm.contract.fields import OPTIONAL_FIELDS
from rllm.contract.names import REFUSED_HOOKIMPL_OPTIONS
from rllm.errors import PluginContractError, PluginHookError
from rllm.plugins import hookspecs
from rllm.plugins.discovery import Source
from rllm.plugins.hook_kinds import HOOK_KINDS, HookKind
from rllm.plugins.registrars import REGISTRARS
from rllm.plugins.registry import Entry, EstimatorEntry, LossEntry, Registry, first_unknown
from rllm.plugins.reporting import PluginInfo, ReportingMixin, _describe

Claim = tuple[str, Callable[..., Any], dict[str, Any]]
"""An estimator registered by decorator while its plugin's module was imported: name, function, keywords."""

HOOK_NAMES: list[str] = sorted(name for name in vars(hookspecs) if name.startswith("rllm_register_"))
"""Every hook rllm defines (the registration kinds and ``rllm_register_config_sections``)."""


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """Plugin code runs with ``print`` going to stderr, so ``--json`` and JSONL output stay clean."""
    with contextlib.redirect_stdout(sys.stderr):
        yield


class RegistrationMixin(ReportingMixin):
    """The plugin manager's registration: run a plugin's hooks, check each entry, undo a failed plugin.

    The state it reads is created by :class:`rllm.plugins.manager.PluginManager`; the
    ``_importing``, ``_claims_on_import`` and ``_registered_on_import`` bookkeeping belongs to
    loading (:mod:`rllm.plugins.loading`), which attributes estimators registered by decorator
    while a plugin's module is imported.
    """

    hooks: pluggy.PluginManager
    estimators: Registry[EstimatorEntry]
    batch_fields: Registry[Entry]
    losses: Registry[LossEntry]
    _running: Source | None
    _importing: Source | None
    _registered_on_import: dict[str, list[str]]
    _claims_on_import: dict[Source, list[Claim]]

    def register(self, plugin: object, source: Source, module: str | None = None) -> PluginInfo:
        """Register one plugin object and run its registration hooks, attributing every entry.

        A failure rolls the plugin back entirely (its hooks and every entry it made) and is
        reported; strict mode is described on :class:`rllm.plugins.manager.PluginManager`.
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
        inactive = getattr(plugin, "rllm_inactive_reason", None)
        reason = inactive() if callable(inactive) and info.status == "ok" else None
        if reason:
            info.status, info.error = "inactive", str(reason)
        return info

    def _register_hooks(self, plugin: object, source: Source, info: PluginInfo) -> None:
        self._running = source
        try:
            self._run_hooks(plugin, source, info)
        finally:
            self._running = None
        if not self._loading:  # during a load, every plugin's fields are known only at its end
            self._check_requirements(source)

    def _run_hooks(self, plugin: object, source: Source, info: PluginInfo) -> None:
        self._refuse_hookimpl_options(plugin)
        try:
            self.hooks.register(plugin, name=source.plugin)
        except (ValueError, pluggy.PluginValidationError) as exc:
            raise PluginContractError(f"its hooks are invalid: {exc}") from exc
        callers = self.hooks.get_hookcallers(plugin) or []
        info.hooks = sorted(caller.name for caller in callers)
        unknown = [caller.name for caller in callers if caller.spec is None]
        if unknown or not (callers or info.estimators):
            known = HOOK_NAMES
            hints = [
                f"{u!r} (did you mean {difflib.get_close_matches(u, known, n=1, cutoff=0)[0]!r}?)" for u in unknown
            ]
            reason = f"it defines unknown hooks {', '.join(hints)}" if unknown else "it implements no rllm hook"
            unmarked = [name for name in known if callable(getattr(plugin, name, None))]
            if unmarked and not unknown:
                reason += f" ({', '.join(unmarked)} is not marked @rllm.hookimpl; add the decorator)"
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
            refused = [f"{option}=True" for option in REFUSED_HOOKIMPL_OPTIONS if options.get(option)]
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
        """The ``register`` passed to ``kind``'s hook: it records claims for ``source`` and their names in ``names``."""
        return REGISTRARS[kind.attribute](self, source, names)

    def add_estimator(
        self, name: str, fn: Callable[..., Any], source: Source, *, replace: bool = False, **declaration: Any
    ) -> None:
        """Validate and record one estimator claim; ``declaration`` holds the fields of :class:`EstimatorEntry`."""
        who = source.describe()
        if not isinstance(name, str) or not name:
            raise PluginContractError(f"{who} registered an estimator with an invalid name {name!r}.")
        if not callable(fn):
            raise PluginContractError(f"{who} registered estimator {name!r} with a non-callable {fn!r}.")
        entry = EstimatorEntry.declare(name, fn, source, replace=replace, **declaration)
        if not (self._loading or self._running or self._importing):
            self._refuse_unknown_fields(entry)
        self.estimators.add(entry)
        if source in self._claims_on_import:  # a decorator run while the plugin's module was imported
            self._registered_on_import.setdefault(source.plugin, []).append(name)
            self._claims_on_import[source].append((name, fn, {"replace": replace, **declaration}))

    def _refuse_unknown_fields(self, entry: EstimatorEntry) -> None:
        """A ``requires`` entry naming no batch field (built in or declared by a loaded plugin) is refused."""
        known = [*OPTIONAL_FIELDS, *self.batch_fields.names()]
        unknown = first_unknown(entry.requires, known)
        if unknown:
            field_name, hint = unknown
            raise PluginContractError(
                f"{entry.source.describe()} registered estimator {entry.name!r} requiring {field_name!r}, which "
                f"is no batch field{hint}; fields: {', '.join(known)} (declare new ones with "
                "rllm_register_batch_fields)"
            )

    def _check_requirements(self, source: Source) -> None:
        for name in self.estimators.names():
            for entry in self.estimators.claims(name):
                if entry.source == source:
                    self._refuse_unknown_fields(entry)

    def _check_loaded_requirements(self) -> None:
        """After a load: fail (and roll back) each loaded plugin whose estimators require an unknown field."""
        sources = {c.source for name in self.estimators.names() for c in self.estimators.claims(name)}
        for source in sorted(sources, key=lambda source: source.plugin):
            info = self.plugins.get(source.plugin)
            plugin = self.hooks.get_plugin(source.plugin)
            if source.kind == "runtime" or info is None or info.status != "ok":
                continue
            try:
                self._check_requirements(source)
            except PluginContractError as exc:
                self._roll_back(plugin, source, info)
                self._fail(info, PluginContractError, str(exc), exc)

    def add(self, kind: HookKind, name: str, target: Any, source: Source, *, replace: bool = False) -> None:
        """Validate and record one claim checked by its kind's ``problem`` (grouping hooks, backends, kernels, ...)."""
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
