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
import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from rllm.errors import ConfigError, EstimatorOptionError

_TYPE_NAMES: dict[type, str] = {
    bool: "a boolean (true/false)",
    int: "an integer",
    float: "a number",
    str: "a string",
    list: "a list of numbers",
    Mapping: "a mapping",
    object: "any value",
}


@dataclass(frozen=True)
class Option:
    """One keyword option of an estimator.

    ``types`` lists what the value may be: ``bool``, ``int``, ``float`` (ints accepted), ``str``,
    ``list`` (a sequence of numbers), ``Mapping`` or ``object`` (anything). ``None`` is accepted
    when the default is ``None``. ``choices`` restricts strings. ``minimum`` bounds numbers.
    """

    name: str
    types: tuple[type, ...]
    default: Any = None
    doc: str = ""
    choices: tuple[str, ...] | None = None
    minimum: float | None = None

    def check(
        self,
        value: Any,
        estimator: str,
        who: str = "",
        *,
        what: str = "estimator",
        error: type[ConfigError] = EstimatorOptionError,
    ) -> Any:
        """``value`` if it fits this option (numbers as Python floats/ints), else a named error.

        ``who`` (the plugin and distribution) is added to the message; ``what`` and ``error``
        say what owns the option (policy losses reuse these checks).
        """
        estimator = f"{what} {estimator!r} ({who})" if who else f"{what} {estimator!r}"
        if value is None and self.default is None:
            return None
        integral = int in self.types and isinstance(value, numbers.Integral)
        if float in self.types and not integral and isinstance(value, numbers.Real) and _coerce(float, value) is _NO:
            raise error(f"Option {self.name!r} of {estimator} must be a finite number; got {value!r}.")
        for kind in self.types:
            accepted = _coerce(kind, value)
            if accepted is not _NO:
                break
        else:
            raise error(
                f"Option {self.name!r} of {estimator} must be {self.expected()}; got {type(value).__name__} {value!r}."
            )
        if self.choices is not None and accepted not in self.choices:
            close = difflib.get_close_matches(str(accepted), self.choices, n=1, cutoff=0.5)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise error(
                f"Option {self.name!r} of {estimator} must be one of "
                f"{', '.join(map(repr, self.choices))}; got {accepted!r}.{hint}"
            )
        if self.minimum is not None and isinstance(accepted, int | float) and not accepted >= self.minimum:
            raise error(f"Option {self.name!r} of {estimator} must be at least {self.minimum}; got {accepted!r}.")
        return accepted

    def expected(self) -> str:
        if self.choices is not None:
            return "one of " + ", ".join(map(repr, self.choices))
        return " or ".join(_TYPE_NAMES.get(kind, kind.__name__) for kind in self.types)

    def describe(self) -> dict[str, Any]:
        """JSON-friendly description (``rllm estimators --json``)."""
        default = (
            self.default if isinstance(self.default, str | int | float | bool | type(None)) else repr(self.default)
        )
        return {
            "name": self.name,
            "type": self.expected(),
            "default": default,
            "doc": self.doc,
        }


_NO = object()


def _coerce(kind: type, value: Any) -> Any:
    """``value`` as ``kind`` if it is one (no parsing of strings: 'false' is not a boolean), else ``_NO``."""
    if kind is object:
        return value
    if kind is bool:
        return bool(value) if isinstance(value, bool | np.bool_) else _NO
    if isinstance(value, bool | np.bool_):
        return _NO
    if kind is int:
        return int(value) if isinstance(value, numbers.Integral) else _NO
    if kind is float:  # inf, NaN and integers too large for a float are not option values
        try:
            number = float(value) if isinstance(value, numbers.Real) else math.nan
        except OverflowError:
            return _NO
        return number if math.isfinite(number) else _NO
    if kind is str:
        return value if isinstance(value, str) else _NO
    if kind is list:
        if isinstance(value, str | bytes | Mapping) or not isinstance(value, Sequence | np.ndarray):
            return _NO
        items = list(np.asarray(value).reshape(-1).tolist()) if isinstance(value, np.ndarray) else list(value)
        ok = all(isinstance(v, numbers.Real) and not isinstance(v, bool | np.bool_) for v in items)
        return [float(v) for v in items] if ok else _NO
    if kind is Mapping:
        return value if isinstance(value, Mapping) else _NO
    return value if isinstance(value, kind) else _NO


NUMERICS_CHOICES: dict[str, tuple[str, ...]] = {
    "std": ("population", "unbiased"),
    "single": ("raw", "zero", "error"),
    "zero_variance": ("eps", "zero"),
    "dtype": ("float64", "float32"),
    "whiten": ("std", "var_add", "var_clamp"),
    "whiten_weight": ("responses", "tokens"),
}
"""The one table of the numerics choices: ``Numerics`` checks against it and the options below offer it
(the ``Literal`` types of :mod:`rllm.estimators.numerics` are tied to it by a test)."""

PRESET_NAMES = ("rllm", "verl", "skyrl", "trl", "openrlhf")
"""The numerics presets (``rllm.estimators.numerics.PRESETS`` holds one per name), for the layers below it."""

NUMERICS_OPTIONS: tuple[Option, ...] = (
    Option("preset", (str,), None, f"numeric conventions of a framework: {', '.join(PRESET_NAMES)}"),
    Option("std", (str,), None, "divide the variance by n (population) or n - 1 (unbiased)", NUMERICS_CHOICES["std"]),
    Option("eps", (float,), None, "added to the standard deviation before dividing by it", minimum=0.0),
    Option("epsilon", (float,), None, "alias of eps", minimum=0.0),
    Option("episilon", (float,), None, "alias of eps (the documented API's spelling)", minimum=0.0),
    Option(
        "single",
        (str,),
        None,
        "a group of one trajectory: raw (mean 0, std 1), zero, or error",
        NUMERICS_CHOICES["single"],
    ),
    Option(
        "zero_variance",
        (str,),
        None,
        "a group whose rewards are all equal: eps (divide by eps) or zero",
        NUMERICS_CHOICES["zero_variance"],
    ),
    Option("dtype", (str,), None, "precision of the computation and the result", NUMERICS_CHOICES["dtype"]),
    Option("whiten", (str,), None, "batch whitening: std, var_add or var_clamp", NUMERICS_CHOICES["whiten"]),
    Option("whiten_eps", (float,), None, "epsilon of batch whitening (default: eps)", minimum=0.0),
    Option("whiten_std", (str,), None, "std divisor of batch whitening (default: std)", NUMERICS_CHOICES["std"]),
    Option(
        "whiten_weight",
        (str,),
        None,
        "whitening counts each response once (responses) or once per token (tokens)",
        NUMERICS_CHOICES["whiten_weight"],
    ),
)
"""Options of every estimator registered with ``numerics=True``; resolved into one ``Numerics``."""

NUMERICS_NAMES = frozenset(option.name for option in NUMERICS_OPTIONS)

CONFIG_OPTIONS: tuple[Option, ...] = (
    Option("norm_adv_by_std_in_grpo", (bool,), True, "divide by the group std (GRPO family)"),
    Option("gamma", (float,), 1.0, "discount of per-step returns", minimum=0.0),
    Option("lam", (float,), 0.95, "GAE lambda", minimum=0.0),
    Option("epsilon", (float,), None, "std guard; null keeps the estimator's default", minimum=0.0),
    Option("preset", (str,), None, "numeric conventions of a framework, for every estimator that has numerics"),
)
"""Run-configuration settings offered to every estimator; each receives those it declares.

A caller may pass them at any door (``norm_adv_by_std_in_grpo=False`` to RLOO is not an error,
as in the documented API), but their types are always checked.
"""

CONFIG_NAMES = frozenset(option.name for option in CONFIG_OPTIONS)
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
    """Collection context the signature takes (``algorithm_config``, ``traj_groups``; see :data:`CONTEXT_NAMES`)."""
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

CONTEXT_NAMES: tuple[str, ...] = ("algorithm_config", "traj_groups")
"""What the collection step hands an estimator besides rewards: the run's ``AlgorithmConfig`` and the
role's ``TrajectoryGroup`` list aligned with the groups (rLLM's current estimator contract)."""

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
            kwargs.setdefault(option.name, option.default)
    return kwargs
