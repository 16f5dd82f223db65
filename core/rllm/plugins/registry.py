"""Named registries (estimators, grouping hooks, backends, kernels, losses) that remember who registered what.

A name may be claimed by the built-in plugin, by installed plugins and by user code at run
time. Lookup resolves the claims: user code beats plugins (and warns when it takes a name
without ``replace=True``), a plugin beats a built-in only
when it registered with ``replace=True``, and two plugins claiming one name make that name
(and only that name) an error that names both.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from rllm.contract.fields import OPTIONAL_FIELDS
from rllm.contract.keys import Option
from rllm.contract.names import ESTIMATOR_STYLES, LOSS_AGG_MODES, RLLM_ESTIMATORS, EstimatorStyle
from rllm.errors import (
    LossFailedError,
    NameConflictError,
    NameNotFoundError,
    PluginContractError,
    RLLMError,
    RLLMWarning,
)
from rllm.plugins.discovery import Source, SourceKind
from rllm.plugins.options import UNDECLARED, Declaration, declare


@dataclass(frozen=True)
class Entry:
    """One claim on a name. ``target`` is the registered object (estimator function, hook, class)."""

    name: str
    target: Any
    source: Source
    replace: bool = False

    def same_target(self, other: Entry) -> bool:
        if self.target is other.target or (isinstance(self.target, str) and self.target == other.target):
            return True
        # The same function from a re-imported module (a notebook cell run twice).
        key = getattr(self.target, "__module__", None), getattr(self.target, "__qualname__", None)
        other_key = getattr(other.target, "__module__", None), getattr(other.target, "__qualname__", None)
        return self.source == other.source and None not in key and key == other_key


def is_import_path(target: object) -> bool:
    """Whether ``target`` is a lazy ``"module:attribute"`` registration (imported when first used)."""
    if not isinstance(target, str):
        return False
    module, _, attribute = target.partition(":")
    return bool(module) and bool(attribute)


def import_target(path: str, who: str, hint: str) -> Any:
    """The object a ``"module:attribute"`` path names, imported now; a failure is one line saying ``who`` and why.

    Only a missing module or attribute is reported so: any other error while the module
    imports (an rllm error a plugin raises to explain itself, a bug) propagates unchanged.
    """
    module, _, attribute = path.partition(":")
    try:
        return getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError) as exc:
        raise PluginContractError(f"{who} cannot be loaded from {path!r}: {exc}. {hint}") from None


def first_unknown(given: Iterable[str], known: Sequence[str]) -> tuple[str, str] | None:
    """The first of ``given`` not in ``known``, with a `` (did you mean ...?)`` hint (or ""); None if all are known."""
    for value in given:
        if value not in known:
            close = difflib.get_close_matches(value, known, n=1)
            return value, f" (did you mean {close[0]!r}?)" if close else ""
    return None


E = TypeVar("E", bound=Entry)
_PRECEDENCE: dict[SourceKind, int] = {"runtime": 2, "plugin": 1, "builtin": 0}


class Registry(Generic[E]):
    """Claims on names of one kind of thing (``what``: "estimator", "backend", ...).

    ``not_found`` and ``conflict`` are the error types for an unknown name and for a name two
    plugins claim, so the type of the error says which kind of thing was asked for.
    """

    def __init__(
        self,
        what: str,
        not_found: type[NameNotFoundError],
        conflict: type[NameConflictError],
        why_missing: Callable[[str], str] | None = None,
    ) -> None:
        self.what = what
        self.not_found = not_found
        self.conflict = conflict
        self.why_missing = why_missing
        """Names the plugin that would provide an unknown name, when it is absent or inactive."""
        self._claims: dict[str, list[E]] = {}

    def add(self, entry: E) -> None:
        """Record a claim. User code taking a name replaces its holder with a warning; one of rLLM's own estimators
        (:data:`~rllm.contract.names.RLLM_ESTIMATORS`) only with ``replace=True``, as a plugin's claim needs."""
        claims = self._claims.setdefault(entry.name, [])
        for i, existing in enumerate(claims):
            if existing.same_target(entry):
                claims[i] = entry
                return
        builtin = next((c for c in claims if c.source.kind == "builtin"), None)
        guarded = builtin is not None and entry.name in RLLM_ESTIMATORS
        if entry.source.kind == "runtime" and guarded and not entry.replace:
            raise self.conflict(
                f"{entry.source.describe()} registers {self.what} {entry.name!r}, a name of "
                f"{builtin.source.describe()}. Pass replace=True to replace the built-in on purpose, "
                "or choose another name."
            )
        if entry.source.kind == "runtime" and claims and not entry.replace:
            warnings.warn(
                f"{entry.source.describe()} replaces {self.what} {entry.name!r} of {claims[-1].source.describe()}. "
                "Pass replace=True to say it is on purpose, or choose another name.",
                RLLMWarning,
                stacklevel=4,
            )
        if entry.source.kind == "runtime":
            claims[:] = [c for c in claims if c.source.kind != "runtime"]
        claims.append(entry)

    def discard_source(self, source: Source) -> None:
        """Forget every claim of one source (a plugin that failed half-way or was unregistered)."""
        for name in list(self._claims):
            kept = [c for c in self._claims[name] if c.source != source]
            if kept:
                self._claims[name] = kept
            else:
                del self._claims[name]

    def claims(self, name: str) -> list[E]:
        return list(self._claims.get(name, ()))

    def names(self) -> list[str]:
        return sorted(self._claims)

    def __contains__(self, name: object) -> bool:
        return name in self._claims

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._claims)

    def ignored_claims(self) -> list[E]:
        """Plugin claims on a built-in name made without ``replace=True``: they never win."""
        out = []
        for claims in self._claims.values():
            has_builtin = any(c.source.kind == "builtin" for c in claims)
            out += [c for c in claims if has_builtin and c.source.kind == "plugin" and not c.replace]
        return out

    def resolve(self, name: str) -> E:
        claims = self._claims.get(name)
        if not claims:
            raise self.not_found(self._unknown_message(name))
        top = max(_PRECEDENCE[c.source.kind] for c in claims)
        best = [c for c in claims if _PRECEDENCE[c.source.kind] == top]
        if top == _PRECEDENCE["plugin"] and any(c.source.kind == "builtin" for c in claims):
            replacing = [c for c in best if c.replace]
            if not replacing:
                return next(c for c in claims if c.source.kind == "builtin")
            best = replacing
        if len(best) > 1:
            who = "; ".join(c.source.describe() for c in best)
            raise self.conflict(
                f"{self.what.capitalize()} name {name!r} is registered by more than one plugin: {who}. "
                f"Uninstall one of them, or disable one, e.g. RLLM_DISABLED_PLUGINS={best[-1].source.plugin}"
            )
        return best[0]

    def _unknown_message(self, name: str) -> str:
        known = self.names()
        close = difflib.get_close_matches(str(name), known, n=3, cutoff=0.5)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        if self.why_missing is not None:
            hint = self.why_missing(str(name)) or hint
        listing = ", ".join(known[:LISTED_NAMES]) if known else "none"
        if len(known) > LISTED_NAMES:
            listing += f" and {len(known) - LISTED_NAMES} more (`rllm plugins` lists them all)"
        return (
            f"Unknown {self.what} {name!r}.{hint} Registered: {listing}. Install a plugin that provides it, "
            "or register your own (see `rllm plugins` and docs/plugins.md)."
        )


LISTED_NAMES = 40
"""Names an unknown-name error lists: enough to spot the right one, bounded however many are registered."""


@dataclass(frozen=True)
class EstimatorEntry(Entry):
    """An estimator claim: how to call it and what it declares (the keywords of ``register``).

    A declaration field is one dataclass field below, checked in ``__post_init__``; the
    registrar forwards every keyword it does not know itself to :meth:`declare`.
    """

    style: EstimatorStyle = "grouped"
    requires: tuple[str, ...] = ()
    options: tuple[Option, ...] | None = None
    """The declared options (None: derived from the function's signature)."""
    numerics: bool | str = False
    """True (or a default preset's name): the estimator takes the numerics options."""
    declaration: Declaration = UNDECLARED
    """What the estimator accepts, resolved from ``options`` and ``numerics`` when the entry is made."""

    @property
    def doc(self) -> str:
        """The first line of the estimator's docstring."""
        text = (getattr(self.target, "__doc__", None) or "").strip()
        return text.splitlines()[0] if text else ""

    @classmethod
    def declare(
        cls, name: str, target: Any, source: Source, *, replace: bool = False, **declaration: Any
    ) -> EstimatorEntry:
        """The entry for one ``register(name, fn, **declaration)`` call; unknown keywords are refused."""
        base = {f.name for f in dataclasses.fields(Entry)} | {"declaration"}
        known = [f.name for f in dataclasses.fields(cls) if f.name not in base]
        unknown = first_unknown(declaration, known)
        if unknown:
            key, hint = unknown
            raise PluginContractError(
                f"{source.describe()} registered estimator {name!r} with unknown keyword {key!r}{hint}; "
                f"register() accepts replace, {', '.join(known)}."
            )
        return cls(name=name, target=target, source=source, replace=replace, **declaration)

    def __post_init__(self) -> None:
        who = f"{self.source.describe()} registered estimator {self.name!r}"
        if self.style not in ESTIMATOR_STYLES:
            raise PluginContractError(f"{who} with style {self.style!r}; use 'grouped' or 'batch'.")
        if isinstance(self.requires, str) or not isinstance(self.requires, Iterable):
            raise PluginContractError(f"{who} with requires={self.requires!r}; give a list of field names.")
        requires = tuple(self.requires)
        invalid = [f for f in requires if not isinstance(f, str) or not f.isidentifier()]
        if invalid:
            raise PluginContractError(
                f"{who} requiring {invalid}, which are not field names; built-in fields: {', '.join(OPTIONAL_FIELDS)} "
                "(plugins declare more with rllm_register_batch_fields)."
            )
        object.__setattr__(self, "requires", requires)
        if self.options is not None:
            object.__setattr__(self, "options", tuple(self.options))
        if self.declaration is UNDECLARED:
            try:
                declared = declare(self.target, self.options, self.numerics)
            except TypeError as exc:
                raise PluginContractError(f"{who} with invalid options: {exc}.") from None
            object.__setattr__(self, "declaration", declared)


@dataclass(frozen=True)
class LossEntry(Entry):
    """A policy-loss claim (the keywords of the losses hook's ``register``).

    ``target`` is the loss function or a ``"module:function"`` path, imported by :meth:`load`
    on first use so that registering a torch loss never imports torch. An alias is an entry
    of its own whose ``alias_of`` names the loss it stands for.
    """

    options: tuple[Option, ...] = ()
    aliases: tuple[str, ...] = ()
    agg_modes: tuple[str, ...] | None = None
    needs_old_log_probs: bool = True
    additive: bool = True
    description: str = ""
    alias_of: str | None = None

    def __post_init__(self) -> None:
        who = f"{self.source.describe()} registered loss {self.name!r}"
        target = self.target
        if isinstance(target, str):
            if not is_import_path(target):
                raise PluginContractError(f"{who} with fn={target!r}; give a callable or 'module:function'.")
        elif not callable(target):
            raise PluginContractError(f"{who} with a non-callable {target!r}; give a callable or 'module:function'.")
        options = tuple(self.options)
        if any(not isinstance(o, Option) for o in options):
            raise PluginContractError(f"{who} with options={self.options!r}; give a list of rllm.toolkit.Option.")
        object.__setattr__(self, "options", options)
        if isinstance(self.aliases, str) or any(not isinstance(a, str) or not a for a in self.aliases):
            raise PluginContractError(f"{who} with aliases={self.aliases!r}; give a list of names.")
        if self.name in self.aliases:
            raise PluginContractError(f"{who} with its own name among aliases={list(self.aliases)!r}; drop it.")
        object.__setattr__(self, "aliases", tuple(self.aliases))
        if self.agg_modes is not None:
            modes = (self.agg_modes,) if isinstance(self.agg_modes, str) else tuple(self.agg_modes)
            unknown = [m for m in modes if m not in LOSS_AGG_MODES]
            if unknown:
                raise PluginContractError(
                    f"{who} with unknown agg_modes {unknown}; the modes are {', '.join(LOSS_AGG_MODES)}."
                )
            object.__setattr__(self, "agg_modes", modes)

    @classmethod
    def declare(
        cls, name: str, target: Any, source: Source, *, replace: bool = False, **declaration: Any
    ) -> list[LossEntry]:
        """The entries (the loss, then one per alias) of one ``register(name, fn, **declaration)`` call."""
        known = ["options", "aliases", "agg_modes", "needs_old_log_probs", "additive", "description"]
        unknown = first_unknown(declaration, known)
        if unknown:
            key, hint = unknown
            raise PluginContractError(
                f"{source.describe()} registered loss {name!r} with unknown keyword {key!r}{hint}; "
                f"register() accepts replace, {', '.join(known)}."
            )
        main = cls(name=name, target=target, source=source, replace=replace, **declaration)
        aliases = [dataclasses.replace(main, name=alias, alias_of=name, aliases=()) for alias in main.aliases]
        return [main, *aliases]

    def load(self) -> Callable[..., Any]:
        """The loss function, importing its module on first use; an import failure names the plugin."""
        if not isinstance(self.target, str):
            return self.target  # type: ignore[no-any-return]
        who = f"Loss {self.name!r} of {self.source.describe()}"
        try:
            fn = import_target(
                self.target,
                who,
                "Install what it needs (torch for rllm's losses: pip install torch), or fix the plugin.",
            )
        except RLLMError:
            raise
        except Exception as exc:  # the loss's module failed while it imported: say whose it is
            raise LossFailedError(f"{who}: importing {self.target!r} raised {type(exc).__name__}: {exc}") from exc
        if not callable(fn):
            raise PluginContractError(
                f"Loss {self.name!r} of {self.source.describe()}: {self.target!r} is not callable."
            )
        return fn  # type: ignore[no-any-return]

    @property
    def doc(self) -> str:
        """The description, else the first docstring line of a loss given as a callable."""
        if self.description:
            return self.description
        text = "" if isinstance(self.target, str) else (getattr(self.target, "__doc__", None) or "").strip()
        return text.splitlines()[0] if text else ""
