"""The one declaration of a setting, :class:`Setting`: a configuration key and an estimator's or loss's option.

rllm's key table (``rllm.config.core_keys``), every plugin's config section and every
estimator's and loss's options are made of it; ``ConfigKey`` and ``Option`` are its names in
those roles. It checks a value itself, so rllm's keys and options and a plugin's refuse a bad
value with the same kind of message, naming the key, or the option and its owner.
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
class Setting:
    """One declared setting: a configuration key or an estimator's or loss's option; one type for both.

    ``name`` is the option's name, or the key's dotted path (``rllm.trainer.total_epochs``;
    inside a plugin's section, relative to the section; ``path`` is the same string). ``type``
    says how a value is read: a word (:data:`KeyType`: ``"int"``, ``"float"``, ``"bool"``,
    ``"str"``, ``"list[str]"``, ``"list[int]"``, ``"mapping"``), as YAML gives it, or a tuple of
    Python types a Python caller may pass (``bool``, ``int``, ``float`` (ints accepted), ``str``,
    ``list`` (a sequence of numbers), ``Mapping`` or ``object``), numpy values included.
    ``choices`` holds the allowed values (for ``list[str]``, the allowed items); ``names``
    instead gives a function listing them when they depend on the installed plugins, and
    ``explain`` why a name is not among them. ``minimum``/``maximum`` bound numbers (``above``
    makes the minimum exclusive), ``multiple_of`` makes an integer a multiple of it, and
    ``special`` lists values allowed outside that range (``-1`` meaning "no limit"). ``None``
    passes when ``nullable``, or for a Python-typed setting whose default is ``None``.
    ``required``: an option with no usable default; a call without it is refused before it runs.
    """

    name: str
    type: KeyType | tuple[type, ...]
    default: Any = None
    doc: str = ""
    choices: tuple[Any, ...] | None = None
    minimum: float | None = None
    maximum: float | None = None
    above: bool = False
    special: tuple[Any, ...] = ()
    nullable: bool = False
    multiple_of: int | None = None
    names: Callable[[], Sequence[str]] | None = None
    explain: Callable[[str], str] | None = None
    required: bool = False
    nonempty: bool = False
    """A string (or list) key that must not be empty: an empty host, say, would mean every interface."""

    def __post_init__(self) -> None:
        python_types = isinstance(self.type, tuple) and bool(self.type) and all(isinstance(t, type) for t in self.type)
        if not python_types and self.type not in _TYPE_CHECKS:
            raise ConfigError(
                f"Config key {self.name} has unknown type {self.type!r}; use one of {', '.join(_TYPE_CHECKS)} "
                "(an option may instead give a tuple of Python types, such as (float,))."
            )

    @property
    def path(self) -> str:
        """The key's dotted path: its ``name`` (the word config keys have always used)."""
        return self.name

    @property
    def types(self) -> tuple[type, ...]:
        """The Python types a value may have (a word type as the types its values arrive as)."""
        return self.type if isinstance(self.type, tuple) else _WORD_TYPES[self.type]

    def read(self, value: Any) -> Any:
        """``value`` as this setting's type (numbers as Python floats/ints), or ``_BAD``."""
        if isinstance(self.type, str):
            return _TYPE_CHECKS[self.type](value)
        for kind in self.type:
            accepted = _coerce(kind, value)
            if accepted is not _BAD:
                return accepted
        return _BAD

    def in_range(self, number: Any) -> bool:
        low = self.minimum is None or (number > self.minimum if self.above else number >= self.minimum)
        high = self.maximum is None or number <= self.maximum
        return low and high and (self.multiple_of is None or number % self.multiple_of == 0)

    def type_words(self) -> str:
        if isinstance(self.type, str):
            return _TYPE_WORDS[self.type]
        return " or ".join(_TYPE_NAMES.get(kind, kind.__name__) for kind in self.type)

    def describe(self) -> str:
        """The expected value in words, e.g. ``an integer >= 1 (or -1)``."""
        choices = self.allowed()
        if self.type == "bool" and choices is not None:
            return " or ".join("true" if choice else "false" for choice in choices)
        words = "" if choices is not None and self.type == "str" else self.type_words()
        if self.nonempty:
            words = f"a non-empty {words.removeprefix('a ')}"
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

    def check(
        self,
        value: Any,
        owner: str | None = None,
        who: str = "",
        *,
        what: str = "estimator",
        error: type[ConfigError] = EstimatorOptionError,
    ) -> Any:
        """The value to keep, or a named error.

        Without ``owner`` the setting is a configuration key and the :class:`ConfigError` names
        its path (a number becomes a string for a ``"str"`` key). With it, the setting is an
        option of the ``what`` (estimator, loss) called ``owner``, registered by ``who`` (the
        plugin and distribution), and the error is ``error`` naming all three.
        """
        if owner is None:
            return self._check_key(value)
        described = f"{what} {owner!r} ({who})" if who else f"{what} {owner!r}"
        if value is None and self.required:
            section = "loss_options" if what == "loss" else f"{what}_options.{owner}"
            wanted = f"{self.expected()} {self.bounds()}".strip()
            raise error(
                f"{described[:1].upper()}{described[1:]} needs option {self.name!r}, {wanted}; it has no default "
                f"(in a run: rllm.algorithm.{section}.{self.name})."
            )
        return self._check_option(value, described, error)

    def _check_key(self, value: Any) -> Any:
        if value is None and self.nullable:
            return value
        if any(type(value) is type(special) and value == special for special in self.special):
            return value
        checked = self.read(value)
        if checked is _BAD or (self.nonempty and len(checked) == 0):
            raise self.error(value)
        numbers_ = checked if self.type == "list[int]" else [checked] if self.type in ("int", "float") else []
        if not all(self.in_range(number) for number in numbers_):
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

    def _check_option(self, value: Any, owner: str, error: type[ConfigError]) -> Any:
        if value is None and (self.nullable or self.default is None):
            return None
        types = self.types
        integral = int in types and isinstance(value, numbers.Integral)
        if float in types and not integral and isinstance(value, numbers.Real) and _coerce(float, value) is _BAD:
            raise error(f"Option {self.name!r} of {owner} must be a finite number; got {value!r}.")
        accepted = self.read(value)
        if accepted is _BAD:
            raise error(
                f"Option {self.name!r} of {owner} must be {self.expected()}; got {type(value).__name__} {value!r}."
            )
        allowed = self.allowed()
        if allowed is not None and accepted not in allowed:
            close = difflib.get_close_matches(str(accepted), [str(a) for a in allowed], n=1, cutoff=0.5)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise error(
                f"Option {self.name!r} of {owner} must be one of "
                f"{', '.join(map(repr, allowed))}; got {accepted!r}.{hint}"
            )
        if isinstance(accepted, int | float) and not isinstance(accepted, bool) and not self.in_range(accepted):
            raise error(f"Option {self.name!r} of {owner} must be {self.bounds()}; got {accepted!r}.")
        return accepted

    def bounds(self) -> str:
        """The allowed range in words: ``above 0``, ``at least 0 and at most 1``."""
        parts = [] if self.minimum is None else [f"{'above' if self.above else 'at least'} {self.minimum}"]
        parts += [] if self.maximum is None else [f"at most {self.maximum}"]
        return " and ".join([*parts, *([] if self.multiple_of is None else [f"a multiple of {self.multiple_of}"])])

    def expected(self) -> str:
        """The expected option value in words: its choices, or its types."""
        allowed = self.allowed()
        if allowed is not None:
            return "one of " + ", ".join(map(repr, allowed))
        return self.type_words()

    def as_json(self) -> dict[str, Any]:
        """JSON-friendly description of an option (``rllm estimators --json``, ``rllm losses --json``)."""
        default = (
            self.default if isinstance(self.default, str | int | float | bool | type(None)) else repr(self.default)
        )
        return {"name": self.name, "type": self.expected(), "default": default, "doc": self.doc}


ConfigKey = Setting
"""A configuration key: a :class:`Setting` with a type word, checked by ``check(value)``."""

Option = Setting
"""An estimator's or loss's keyword option: a :class:`Setting`, usually with Python types, checked by
``check(value, owner, who)``."""


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
    return str(value) if isinstance(value, int | float) and not isinstance(value, bool) else _BAD


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

_WORD_TYPES: dict[str, tuple[type, ...]] = {
    "int": (int,),
    "float": (float,),
    "bool": (bool,),
    "str": (str,),
    "list[str]": (list,),
    "list[int]": (list,),
    "mapping": (Mapping,),
}


def _coerce(kind: type, value: Any) -> Any:
    """``value`` as ``kind`` if it is one (no parsing of strings: 'false' is not a boolean), else ``_BAD``."""
    if kind is object:
        return value
    if kind is bool:
        return bool(value) if isinstance(value, bool | np.bool_) else _BAD
    if isinstance(value, bool | np.bool_):
        return _BAD
    if kind is int:
        return int(value) if isinstance(value, numbers.Integral) else _BAD
    if kind is float:  # inf, NaN and integers too large for a float are not option values
        try:
            number = float(value) if isinstance(value, numbers.Real) else math.nan
        except OverflowError:
            return _BAD
        return number if math.isfinite(number) else _BAD
    if kind is str:
        return value if isinstance(value, str) else _BAD
    if kind is list:
        if isinstance(value, str | bytes | Mapping) or not isinstance(value, Sequence | np.ndarray):
            return _BAD
        items = list(np.asarray(value).reshape(-1).tolist()) if isinstance(value, np.ndarray) else list(value)
        ok = all(isinstance(v, numbers.Real) and not isinstance(v, bool | np.bool_) for v in items)
        return [float(v) for v in items] if ok else _BAD
    if kind is Mapping:
        return value if isinstance(value, Mapping) else _BAD
    return value if isinstance(value, kind) else _BAD
