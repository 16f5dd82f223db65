"""Rollouts as JSON Lines: pass 1 keeps what the estimators need, pass 2 writes every line back.

:class:`Reader` parses and checks each line and keeps only the fields its role's estimator
needs, as compact arrays (:class:`Columns`), so memory grows with the number of rollouts and
not with the size of the lines. ``_write`` then copies each line as read, splicing the
advantage in before its closing brace (a line that already has the field is re-serialised).
``json`` per line rather than a JSON Lines package (none is a dependency, and none keeps a few fields as
arrays or writes a line back as it was read).
"""

from __future__ import annotations

import json
import math
import sys
from array import array
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import IO, Any

from rllm.cli.rollout_file import Progress
from rllm.config.algorithm import AlgorithmConfig, estimator_name
from rllm.contract.fields import BUILTIN_FIELDS, BatchField
from rllm.errors import RLLMError, RolloutFileError
from rllm.estimators.batch import declared_fields
from rllm.estimators.compute import get_estimator
from rllm.estimators.resolution import Resolved
from rllm.types import DEFAULT_ROLE

GROUP_FIELDS = ("group_id", "task_id")

LINE_FIELDS: dict[str, tuple[str, str]] = {
    name: (field.jsonl_key, field.doc) for name, field in BUILTIN_FIELDS.items() if field.jsonl_key is not None
}
"""Estimator input (batch field) -> the per-line JSON field it is read from, and what it holds."""


@dataclass
class Columns:
    """What pass 1 keeps per rollout: numbers in compact arrays, never the lines themselves."""

    rewards: array[float] = field(default_factory=lambda: array("d"))
    groups: array[int] = field(default_factory=lambda: array("q"))
    roles: array[int] = field(default_factory=lambda: array("q"))
    numbers: dict[str, array[float]] = field(default_factory=dict)
    rows: dict[str, tuple[array[float], array[int]]] = field(default_factory=dict)
    component_keys: list[str] | None = None
    has_field: bytearray = field(default_factory=bytearray)
    group_labels: list[Any] = field(default_factory=list)
    role_names: list[str] = field(default_factory=list)
    nonfinite: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.rewards)


def _label_key(label: Any) -> tuple[str, Any]:
    """JSON types stay apart: 1, 1.0, "1", true and null are different groups."""
    return type(label).__name__, label


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _line_fields(declared: Mapping[str, BatchField] | None = None) -> dict[str, tuple[str, str]]:
    """Batch field -> (per-line JSON key, what it holds): the built-in ones and those plugins declare.

    ``declared``: the fields the command resolved (default: asked of the plugins here, for the help text).
    """
    if declared is None:
        try:
            declared = declared_fields()
        except RLLMError:  # a broken plugin in strict mode is reported when the command runs
            declared = {}
    extra = {name: (field.line_key(name), field.doc or "declared by a plugin") for name, field in declared.items()}
    return {**LINE_FIELDS, **extra}


class Reader:
    """Pass 1: parse each line, check it, and keep only the fields its role's estimator needs.

    A field some other role needs is kept when present (NaN or an empty row otherwise), so
    every column stays aligned with the lines.
    """

    def __init__(
        self,
        source: str,
        config: AlgorithmConfig,
        fields: set[str],
        out_field: str,
        resolved: Resolved | None = None,
    ) -> None:
        self.source, self.config, self.out_field = source, config, out_field
        self.columns = Columns()
        self._group_index: dict[tuple[tuple[str, Any], int], int] = {}
        self._role_index: dict[str, int] = {}
        self._requires: list[tuple[str, frozenset[str]]] = []
        self.resolved = resolved  # the command's one resolution; None: each lookup asks the plugins
        self.line_fields = _line_fields(None if resolved is None else resolved.fields)
        if resolved is not None:
            declared: Mapping[str, BatchField] = resolved.fields
        else:
            declared = declared_fields() if fields - set(LINE_FIELDS) else {}
        row_fields = (
            {"reward_components"}
            | {n for n, f in BUILTIN_FIELDS.items() if f.per_step or f.per_token}
            | {n for n, f in declared.items() if f.per_step}
        )
        for name in fields - row_fields:
            self.columns.numbers[name] = array("d")
        for name in fields & row_fields:
            self.columns.rows[name] = (array("d"), array("q", [0]))

    def fail(self, number: int, message: str) -> RolloutFileError:
        return RolloutFileError(f"{self.source}, line {number}: {message}")

    def number(self, number: int, json_name: str, value: float) -> float:
        """``value`` as a float; an integer too large for one is this line's error, not an OverflowError."""
        try:
            return float(value)
        except OverflowError:
            raise self.fail(number, f"'{json_name}' is too large for a float ({len(str(value))} digits).") from None

    def _role(self, role: str) -> int:
        role_id = self._role_index.get(role)
        if role_id is None:
            role_id = self._role_index[role] = len(self._role_index)
            self.columns.role_names.append(role)
            name = estimator_name(self.config.estimator_for(role))
            entry = get_estimator(name) if self.resolved is None else self.resolved.entry(name)
            self._requires.append((name, frozenset(entry.requires)))
        return role_id

    def add(self, number: int, raw: bytes) -> None:
        try:
            record = json.loads(raw)
        except UnicodeDecodeError as exc:
            raise self.fail(number, f"not UTF-8 text ({exc.reason} at byte {exc.start}).") from None
        except json.JSONDecodeError as exc:
            raise self.fail(number, f"not valid JSON ({exc.msg}).") from None
        except ValueError:  # Python's limit on the digits of an integer it converts from text
            limit = sys.get_int_max_str_digits()
            raise self.fail(
                number, f"holds an integer of more than {limit:,} digits, more than Python reads; shorten it."
            ) from None
        except RecursionError:
            raise self.fail(number, "nested too deeply to read; flatten the line's lists and objects.") from None
        if not isinstance(record, dict):
            raise self.fail(number, f"expected a JSON object, got {type(record).__name__}.")
        cols = self.columns
        label = next((record[key] for key in GROUP_FIELDS if key in record), _MISSING)
        if label is _MISSING:
            raise self.fail(number, "no group label; add 'group_id' or 'task_id'.")
        if isinstance(label, list | dict):
            raise self.fail(number, f"the group label must be a string, number, boolean or null, got {label!r}.")
        role = record.get("role", DEFAULT_ROLE)
        if not isinstance(role, str):
            raise self.fail(number, f"'role' must be a string, got {role!r}.")
        if "reward" not in record:
            raise self.fail(number, f"no 'reward' field (the line has {_keys(record)}).")
        reward = record["reward"]
        if reward is not None and not _is_number(reward):
            raise self.fail(number, f"'reward' must be a number or null, got {_short(reward)}.")
        reward = math.nan if reward is None else self.number(number, "reward", reward)
        if not math.isfinite(reward):
            cols.nonfinite.append(len(cols))
        role_id = self._role(role)
        key = (_label_key(label), role_id)
        group = self._group_index.setdefault(key, len(self._group_index))
        if group == len(cols.group_labels):
            cols.group_labels.append(label)
        cols.rewards.append(reward)
        cols.groups.append(group)
        cols.roles.append(role_id)
        cols.has_field.append(self.out_field in record)
        if cols.numbers or cols.rows:
            self._fields(number, record, *self._requires[role_id])

    def _fields(self, number: int, record: Mapping[str, Any], estimator: str, requires: frozenset[str]) -> None:
        for name, values in self.columns.numbers.items():
            json_name, what = self.line_fields[name]
            value = record.get(json_name)
            if value is None and name not in requires:
                values.append(math.nan)
                continue
            if value is None:
                raise self.fail(number, f"no '{json_name}' field, which estimator {estimator!r} needs.")
            if not _is_number(value) or (name == "response_lengths" and not _is_count(value)):
                raise self.fail(number, f"'{json_name}' must be {what.split(':')[0]}, got {_short(value)}.")
            values.append(self.number(number, json_name, value))
        for name, (values, offsets) in self.columns.rows.items():
            json_name = self.line_fields[name][0]
            value = record.get(json_name)
            if value is None and name in requires:
                raise self.fail(number, f"no '{json_name}' field, which estimator {estimator!r} needs.")
            if value is not None:
                values.extend(self._row(number, json_name, value))
            offsets.append(len(values))

    def _row(self, number: int, json_name: str, value: Any) -> list[float]:
        if json_name == "reward_components" and isinstance(value, dict):
            keys = self.columns.component_keys
            if keys is None:
                keys = self.columns.component_keys = list(value)
            if sorted(value) != sorted(keys):
                raise self.fail(number, f"'reward_components' must have the keys {keys}, got {list(value)}.")
            value = [value[k] for k in keys]
        if not isinstance(value, list) or not all(_is_number(v) for v in value):
            raise self.fail(number, f"'{json_name}' must be a list of numbers, got {_short(value)}.")
        return [self.number(number, json_name, v) for v in value]


_MISSING = object()
_COUNT_LIMIT = 2**53
"""Largest response length a float holds exactly; anything longer is not a token count."""


def _is_count(value: float) -> bool:
    """A whole number of tokens: not negative, not NaN or infinite, not beyond a float's integers."""
    if isinstance(value, int):
        return 0 <= value <= _COUNT_LIMIT
    return math.isfinite(value) and 0 <= value <= _COUNT_LIMIT and value == int(value)


def _short(value: Any, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters: a message names the value, it does not reprint the line."""
    text = (
        repr(value)
        if not isinstance(value, int) or value.bit_length() < 200
        else f"an integer of {len(str(value))} digits"
    )
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _keys(record: Mapping[str, Any], limit: int = 8) -> str:
    names = list(record)
    shown = ", ".join(map(repr, names[:limit])) + (f" and {len(names) - limit} more" if len(names) > limit else "")
    return f"the keys {shown}" if names else "no keys"


def _lines(handle: IO[bytes], progress: Progress, stage: str) -> Iterator[tuple[int, bytes]]:
    """Numbered non-blank lines; the count of bytes read drives the progress report."""
    done = 0
    for number, raw in enumerate(handle, start=1):
        done += len(raw)
        if number % 4096 == 0:
            progress.update(stage, done)
        if raw.strip():
            yield number, raw


def _write(handle: IO[bytes], out: Any, cols: Columns, advantages: Any, out_field: str, progress: Progress) -> None:
    """Pass 2: each line as read, with the advantage spliced in before its closing brace."""
    key = b", " + json.dumps(out_field).encode() + b": "
    scalar = not isinstance(advantages, list)
    values = advantages.tolist() if scalar else advantages
    position = 0
    for _, raw in _lines(handle, progress, "writing"):
        if position >= len(cols):
            raise RolloutFileError("The input changed while it was read; nothing was written.")
        value = values[position]
        if cols.has_field[position]:
            record = json.loads(raw)
            record[out_field] = value
            out.write(json.dumps(record).encode() + b"\n")
        else:
            body = raw.rstrip()
            text = repr(value) if scalar else json.dumps(value)
            out.write(body[:-1] + key + text.encode() + b"}\n")
        position += 1
    if position != len(cols):
        raise RolloutFileError("The input changed while it was read; nothing was written.")
