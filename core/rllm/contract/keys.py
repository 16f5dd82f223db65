"""The declarations a setting is made of: a configuration key, and an estimator's or loss's option.

:class:`ConfigKey` is what rllm's table (:mod:`rllm.config.core_keys`) and every plugin's
section are made of; :class:`Option` is one keyword option of an estimator or a loss. Each
checks a value itself, so rllm's keys and a plugin's refuse a bad value with the same kind
of message.
"""

from __future__ import annotations

import difflib
import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from rllm.errors import ConfigError, EstimatorOptionError

KeyType = Literal["int", "float", "bool", "str", "list[str]", "list[int]", "mapping"]

_TYPE_WORDS: dict[str, str] = {
    "int": "an integer",
    "float": "a number",
    "bool": "true or false",
    "str": "a string",
    "list[str]": "a list of strings",
    "list[int]": "a list of integers",
    "mapping": "a mapping",
}


@dataclass(frozen=True)
class ConfigKey:
    """One configuration key.

    ``path`` is dotted (``rllm.trainer.total_epochs``); inside a plugin's section it is
    relative to the section. ``choices`` holds the allowed values (for ``list[str]``, the
    allowed items); ``names`` instead gives a function listing them when they depend on
    the installed plugins (backends, estimators). ``minimum``/``maximum`` bound numbers
    (``above`` makes the minimum exclusive), ``multiple_of`` makes an integer a multiple of
    it, and ``special`` lists values allowed outside that range (``-1`` meaning "no limit").
    A ``mapping`` key holds user-chosen names (roles, options) whose contents the schema does
    not check.
    """

    path: str
    type: KeyType
    default: Any
    doc: str
    choices: tuple[Any, ...] | None = None
    names: Callable[[], Sequence[str]] | None = None
    minimum: float | None = None
    maximum: float | None = None
    above: bool = False
    special: tuple[Any, ...] = ()
    nullable: bool = False
    multiple_of: int | None = None
    explain: Callable[[str], str] | None = None
    """Why a value is not among ``names`` (an installed plugin that failed to load), for the error."""

    def __post_init__(self) -> None:
        if self.type not in _TYPE_CHECKS:
            raise ConfigError(
                f"Config key {self.path} has unknown type {self.type!r}; use one of {', '.join(_TYPE_CHECKS)}."
            )

    def describe(self) -> str:
        """The expected value in words, e.g. ``an integer >= 1 (or -1)``."""
        choices = self.allowed()
        if self.type == "bool" and choices is not None:
            return " or ".join("true" if choice else "false" for choice in choices)
        words = "" if choices is not None and self.type == "str" else _TYPE_WORDS[self.type]
        if self.minimum is not None:
            words += f" {'>' if self.above else '>='} {self.minimum:g}"
        if self.maximum is not None:
            words += f"{' and' if self.minimum is not None else ''} <= {self.maximum:g}"
        if self.multiple_of is not None:
            bounded = self.minimum is not None or self.maximum is not None
            words += f"{',' if bounded else ''} a multiple of {self.multiple_of}"
        if choices is not None:
            what = ", each one of" if self.type == "list[str]" else "one of"
            words += f"{what} {', '.join(map(str, choices))}"
        extras = [*map(repr, self.special), *(["null"] if self.nullable else [])]
        if extras:
            words += f" (or {' or '.join(extras)})"
        return words

    def allowed(self) -> Sequence[Any] | None:
        return self.names() if self.names is not None else self.choices

    def check(self, value: Any) -> Any:
        """The value to keep (a number becomes a string for a string key), or :class:`ConfigError`."""
        if value is None and self.nullable:
            return value
        if any(type(value) is type(special) and value == special for special in self.special):
            return value
        checked = _TYPE_CHECKS[self.type](value)
        if checked is _BAD:
            raise self.error(value)
        for number in checked if self.type == "list[int]" else [checked] if self.type in ("int", "float") else []:
            low_ok = self.minimum is None or (number > self.minimum if self.above else number >= self.minimum)
            high_ok = self.maximum is None or number <= self.maximum
            multiple_ok = self.multiple_of is None or number % self.multiple_of == 0
            if not (low_ok and high_ok and multiple_ok):
                raise self.error(value)
        allowed = self.allowed()
        if allowed is not None:
            items = checked if self.type == "list[str]" else [checked]
            unknown = [item for item in items if item not in allowed]
            if unknown:
                close = difflib.get_close_matches(str(unknown[0]), [str(a) for a in allowed], n=1, cutoff=0.6)
                hint = f" Did you mean {close[0]!r}?" if close else ""
                if self.explain is not None:
                    hint = self.explain(str(unknown[0])) or hint
                raise ConfigError(f"{self.path} must be {self.describe()}; got {_show(value)}.{hint}")
        return checked

    def error(self, value: Any) -> ConfigError:
        kind = "" if value is None else f" ({type(value).__name__})"
        return ConfigError(f"{self.path} must be {self.describe()}; got {_show(value)}{kind}.")


_BAD = object()


def _show(value: Any) -> str:
    """A value as the user wrote it in YAML: true/false/null, strings quoted."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return "null" if value is None else repr(value)


_INT_LIMIT = 2**63
"""Integer settings fit a signed 64-bit integer (what numpy, torch and the checkpoints hold)."""


def _int(value: Any) -> Any:
    if not isinstance(value, int) or isinstance(value, bool) or not -_INT_LIMIT <= value < _INT_LIMIT:
        return _BAD
    return value


def _float(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return _BAD
    return value


def _bool(value: Any) -> Any:
    """Only real booleans (YAML's true/false arrive as such); the string 'false' is refused."""
    return value if isinstance(value, bool) else _BAD


def _str(value: Any) -> Any:
    if isinstance(value, str):
        return value
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else _BAD


def _str_list(value: Any) -> Any:
    if isinstance(value, list | tuple) and all(isinstance(item, str) for item in value):
        return list(value)
    return _BAD


def _int_list(value: Any) -> Any:
    if isinstance(value, list | tuple) and all(_int(item) is not _BAD for item in value):
        return list(value)
    return _BAD


def _mapping(value: Any) -> Any:
    return value if isinstance(value, Mapping) else _BAD


_TYPE_CHECKS: dict[str, Callable[[Any], Any]] = {
    "int": _int,
    "float": _float,
    "bool": _bool,
    "str": _str,
    "list[str]": _str_list,
    "list[int]": _int_list,
    "mapping": _mapping,
}


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
    when the default is ``None``. ``choices`` restricts strings. ``minimum`` and ``maximum`` bound
    numbers (``above`` makes the minimum exclusive: a temperature that divides must not be 0).
    ``required``: the option has no usable default; a call without it is refused before it runs.
    """

    name: str
    types: tuple[type, ...]
    default: Any = None
    doc: str = ""
    choices: tuple[str, ...] | None = None
    minimum: float | None = None
    maximum: float | None = None
    above: bool = False
    required: bool = False

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
        owner = estimator
        estimator = f"{what} {estimator!r} ({who})" if who else f"{what} {estimator!r}"
        if value is None and self.required:
            section = "loss_options" if what == "loss" else f"{what}_options.{owner}"
            wanted = f"{self.expected()} {self.bounds()}".strip()
            raise error(
                f"{estimator[:1].upper()}{estimator[1:]} needs option {self.name!r}, {wanted}; it has no default "
                f"(in a run: rllm.algorithm.{section}.{self.name})."
            )
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
        if isinstance(accepted, int | float) and not isinstance(accepted, bool):
            low = self.minimum is None or (accepted > self.minimum if self.above else accepted >= self.minimum)
            if not (low and (self.maximum is None or accepted <= self.maximum)):
                raise error(f"Option {self.name!r} of {estimator} must be {self.bounds()}; got {accepted!r}.")
        return accepted

    def bounds(self) -> str:
        """The allowed range in words: ``above 0``, ``at least 0 and at most 1``."""
        parts = [] if self.minimum is None else [f"{'above' if self.above else 'at least'} {self.minimum}"]
        return " and ".join([*parts, *([] if self.maximum is None else [f"at most {self.maximum}"])])

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
