"""Declared estimator options and the one policy that checks what callers pass.

An estimator declares its options when it registers (name, accepted types, default, a one-line
doc); every door checks caller options against that declaration in :func:`resolve_options`:
an unknown option is an error with a close-match suggestion, an ill-typed one names the
option, the estimator and the expected type. Estimators registered without a declaration
(seed-era code, ``fn(rewards, **kwargs)``) get one derived from their signature once, at
registration.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from rllm.contract.keys import Option
from rllm.contract.options import (
    CONFIG_NAMES,
    CONFIG_OPTIONS,
    CONTEXT_NAMES,
    NUMERICS_CHOICES,
    NUMERICS_NAMES,
    NUMERICS_OPTIONS,
    PRESET_NAMES,
)
from rllm.errors import EstimatorOptionError

__all__ = [
    "CONFIG_NAMES",
    "CONFIG_OPTIONS",
    "CONTEXT_NAMES",
    "NUMERICS_CHOICES",
    "NUMERICS_NAMES",
    "NUMERICS_OPTIONS",
    "PRESET_NAMES",
    "UNDECLARED",
    "Declaration",
    "Option",
    "declare",
    "resolve_options",
]

_CONFIG_BY_NAME = {option.name: option for option in CONFIG_OPTIONS}


@dataclass(frozen=True)
class Declaration:
    """What an estimator accepts: declared options, or (undeclared) what its signature names."""

    options: tuple[Option, ...]
    numerics: bool = False
    default_preset: str | None = None
    """The numerics preset used when the caller names none (an estimator that reproduces one framework)."""
    open: bool = False
    """True for an undeclared estimator whose signature takes ``**kwargs``: any option passes through."""
    declared: bool = True
    wants: tuple[str, ...] = ()
    """Collection context the signature takes (``algorithm_config``, ``traj_groups``; see
    :data:`~rllm.contract.options.CONTEXT_NAMES`)."""
    needs: tuple[str, ...] = ()
    """The part of ``wants`` that the signature requires (no default)."""

    def names(self) -> frozenset[str]:
        names = {option.name for option in self.options}
        return frozenset(names | NUMERICS_NAMES) if self.numerics else frozenset(names)

    def find(self, name: str) -> Option | None:
        for option in self.options:
            if option.name == name:
                return option
        if self.numerics:
            return next((option for option in NUMERICS_OPTIONS if option.name == name), None)
        return None


UNDECLARED = Declaration(options=(), open=True, declared=False)
"""Placeholder for entries made without :func:`declare` (they accept any option)."""

_POSITIONAL = frozenset({"rewards", "batch", *CONTEXT_NAMES})


def _context(params: list[inspect.Parameter], declared: bool) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Context names the signature takes, and those it requires.

    Undeclared estimators with ``**kwargs`` take every context name, as rLLM passes them to every
    estimator; declared ones get only what their signature names.
    """
    by_name = {p.name: p for p in params if p.kind is not inspect.Parameter.VAR_POSITIONAL}
    takes_any = not declared and any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)
    wants = tuple(name for name in CONTEXT_NAMES if name in by_name or takes_any)
    needs = tuple(
        name for name in CONTEXT_NAMES if name in by_name and by_name[name].default is inspect.Parameter.empty
    )
    return wants, needs


def declare(fn: Callable[..., Any], options: Sequence[Option] | None, numerics: bool | str) -> Declaration:
    """The declaration of an estimator; without ``options``, derived from ``fn``'s signature.

    ``numerics`` is True, or the name of the preset the estimator uses by default.
    """
    if isinstance(numerics, str):
        return replace(declare(fn, options, True), default_preset=numerics)
    try:
        params: list[inspect.Parameter] | None = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = None
    if options is not None:
        options = tuple(options)
        for option in options:
            if not isinstance(option, Option):
                raise TypeError(f"options must be rllm.toolkit.Option objects, got {option!r}")
        wants, needs = _context(params or [], declared=True)
        return Declaration(options=options, numerics=numerics, wants=wants, needs=needs)
    if params is None:
        return Declaration(options=(), numerics=numerics, open=True, declared=False)
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)
    derived = tuple(
        Option(p.name, (object,), None if p.default is inspect.Parameter.empty else p.default)
        for p in params
        if p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        and p.name not in _POSITIONAL
        and p.name != "numerics"
    )
    wants, needs = _context(params, declared=False)
    return Declaration(options=derived, numerics=numerics, open=takes_any, declared=False, wants=wants, needs=needs)


def resolve_options(
    estimator: str,
    declaration: Declaration,
    options: Mapping[str, Any],
    ambient: Mapping[str, Any],
    who: str,
) -> dict[str, Any]:
    """Keyword arguments for one call: caller ``options`` checked strictly, ``ambient`` config settings
    passed where declared (an undeclared estimator with ``**kwargs`` gets them all)."""
    kwargs: dict[str, Any] = {}
    run_level = {k: v for k, v in options.items() if k in CONFIG_NAMES}
    options = {k: v for k, v in options.items() if k not in CONFIG_NAMES}
    for name, value in {**ambient, **run_level}.items():
        setting = _CONFIG_BY_NAME.get(name)
        if setting is not None:
            value = setting.check(value, estimator, who)
        if value is None:
            continue
        option = declaration.find(name)
        if option is not None:
            kwargs[name] = option.check(value, estimator, who)
        elif declaration.open:
            kwargs[name] = value
    for name, value in options.items():
        option = declaration.find(name)
        if option is not None:
            kwargs[name] = option.check(value, estimator, who)
        elif declaration.open:
            kwargs[name] = value
        else:
            known = sorted(declaration.names())
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise EstimatorOptionError(
                f"Estimator {estimator!r} ({who}) has no option {name!r}.{hint} Its options: "
                f"{', '.join(known) or 'none'} (see `rllm estimators {estimator}`)."
            )
    if declaration.declared:  # every declared option arrives, with its declared default when not given
        for option in declaration.options:
            if option.required and kwargs.get(option.name) is None:
                option.check(None, estimator, who)
            kwargs.setdefault(option.name, option.default)
    return kwargs
