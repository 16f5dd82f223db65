"""``rllm advantages``: add advantages to rollouts stored as JSON Lines.

The file is read twice: once for the fields the estimator needs (memory grows with the
number of rollouts, not the size of the lines), then again to write every line back with
the advantage added. Nothing is written until every line has been checked.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import tempfile
import time
import warnings
from array import array
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import IO, Any, cast

import numpy as np

from rllm.cli.args import UsageError, add_config_arguments, command_parser, split_words
from rllm.config.algorithm import AlgorithmConfig, estimator_name
from rllm.errors import RLLMError, RLLMWarning, RolloutFileError
from rllm.estimators.batch import OPTIONAL_FIELDS, AdvantageBatch, Ragged, declared_fields
from rllm.estimators.collect import estimate_role, per_step_share, summarize
from rllm.estimators.compute import get_estimator
from rllm.estimators.resolution import Resolved, resolve_plugins
from rllm.io import exit_on_signals, open_output
from rllm.plugins.fields import BUILTIN_FIELDS
from rllm.toolkit import numpy_only
from rllm.types import DEFAULT_ROLE

SAMPLE = "sample_rollouts.jsonl"
GROUP_FIELDS = ("group_id", "task_id")
SUMMARY_ROLES = 10
"""Roles the closing summary lists (in order of first appearance); more would bury the command's output."""
_INPUT_KEYS = frozenset({"reward", "role", *GROUP_FIELDS})
"""Fields the command reads that ``--field`` would overwrite."""

LINE_FIELDS: dict[str, tuple[str, str]] = {
    name: (field.jsonl_key, field.doc) for name, field in BUILTIN_FIELDS.items() if field.jsonl_key is not None
}
"""Estimator input (batch field) -> the per-line JSON field it is read from, and what it holds."""

_DESCRIPTION = """Add advantages to rollouts stored as JSON Lines, one JSON object per line.

Fields read from each line:
  reward             number (required)
  group_id/task_id   the group label: a string, number, boolean or null; JSON types are
                     kept, so 1, "1", 1.0 and null are four different groups
  role               string (optional): each role is grouped and estimated separately
                     (rllm.algorithm.estimator_map chooses an estimator per role)
{fields}
Every other field is written back unchanged, with the advantage added (a list of per-step
advantages for per-step estimators). The file is read twice, so memory grows with the
number of rollouts only; nothing is written until every line has been checked. An output
file is replaced atomically, keeping its permissions; a FIFO, device or '-' is streamed to.
"""


def _fields_help() -> str:
    """The per-line fields, and which registered estimators need them (help must work even if plugins fail)."""
    lines = [f"  {name:<18} {doc}" for name, doc in _line_fields().values()]
    from rllm.plugins.manager import get_plugin_manager

    try:
        names = get_plugin_manager().estimators.names()
    except RLLMError as exc:  # a broken plugin in strict mode is reported when the command runs
        names, needs = [], [f"(not available: {exc})"]
    else:
        needs = []
    for name in names:
        try:
            requires = get_estimator(name).requires
        except RLLMError:  # a name two plugins claim is reported when it is used
            continue
        if requires:
            needs.append(f"{name} ({', '.join(_line_fields().get(r, (r,))[0] for r in requires)})")
    return "\n".join(lines) + "\nEstimators that need them: " + ", ".join(needs) + "\n"


def add_parser(sub: Any) -> None:
    parser = command_parser(
        sub,
        "advantages",
        "compute advantages for rollouts in a JSON Lines file",
        _DESCRIPTION.format(fields=_fields_help()),
        [
            "rllm advantages rollouts.jsonl -e rloo -o scored.jsonl",
            "rllm advantages rollouts.jsonl -e opo        # needs response_length on every line",
            "cat rollouts.jsonl | rllm advantages - rllm.algorithm.estimator_options.preset=verl",
        ],
    )
    add_config_arguments(
        parser, f"the rollout file (.jsonl; '-' for stdin; default: the bundled {SAMPLE}), config files, overrides"
    )
    parser.add_argument("-o", "--output", help="write the rollouts with advantages here (default: stdout)")
    parser.add_argument("-e", "--estimator", help="estimator name (overrides the config), e.g. grpo, rloo")
    parser.add_argument("--field", default="advantage", help="name of the field to add (default: advantage)")
    parser.set_defaults(run=run)


# -- reading ---------------------------------------------------------------------------------
class Progress:
    """A one-line progress report on stderr, only when stderr is a terminal."""

    def __init__(self, total: int | None, stream: IO[str] | None = None) -> None:
        self.total, self.stream = total, stream or sys.stderr
        self.enabled = self.stream.isatty()
        self._shown = 0.0
        self._stage = ""

    def update(self, stage: str, done: int) -> None:
        now = time.monotonic()
        if not self.enabled or (stage == self._stage and now - self._shown < 0.2):
            return
        self._shown, self._stage = now, stage
        share = f" {100 * done / self.total:3.0f}%" if self.total else ""
        self.stream.write(f"\rrllm advantages: {stage}{share} ({done / 1e6:.1f} MB)")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self._shown:
            self.stream.write("\r\033[K")
            self.stream.flush()


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


def _line_fields() -> dict[str, tuple[str, str]]:
    """Batch field -> (per-line JSON key, what it holds): the built-in ones and those plugins declare."""
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

    def __init__(self, source: str, config: AlgorithmConfig, fields: set[str], out_field: str) -> None:
        self.source, self.config, self.out_field = source, config, out_field
        self.columns = Columns()
        self._group_index: dict[tuple[tuple[str, Any], int], int] = {}
        self._role_index: dict[str, int] = {}
        self._requires: list[tuple[str, frozenset[str]]] = []
        self.line_fields = _line_fields()
        declared = declared_fields() if fields - set(LINE_FIELDS) else {}
        row_fields = {"step_rewards", "step_values", "reward_components"} | {
            n for n, f in declared.items() if f.per_step
        }
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
            self._requires.append((name, frozenset(get_estimator(name).requires)))
        return role_id

    def add(self, number: int, raw: bytes) -> None:
        try:
            record = json.loads(raw)
        except UnicodeDecodeError as exc:
            raise self.fail(number, f"not UTF-8 text ({exc.reason} at byte {exc.start}).") from None
        except json.JSONDecodeError as exc:
            raise self.fail(number, f"not valid JSON ({exc.msg}).") from None
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


# -- estimating ------------------------------------------------------------------------------
def _configured(config: AlgorithmConfig) -> list[str]:
    """The configured estimators' names: the default and each role's."""
    return list(dict.fromkeys([estimator_name(config.estimator), *map(estimator_name, config.estimator_map.values())]))


def _needed_fields(config: AlgorithmConfig, resolved: Resolved) -> set[str]:
    """Batch fields the configured estimators (default and per role, resolved in ``resolved``) require."""
    needed: set[str] = set()
    line_fields = _line_fields()
    for name in _configured(config):
        for field_name in resolved.entry(name).requires:
            if field_name not in line_fields and field_name not in ("roles", "task_ids"):
                raise RolloutFileError(
                    f"Estimator {name!r} needs {field_name!r}, which no JSON Lines field provides; "
                    "use rllm.compute_advantages from Python."
                )
            needed.add(field_name)
    return needed


def _rows(values: array[float], offsets: array[int], index: np.ndarray) -> Ragged:
    flat = np.frombuffer(values, dtype=np.float64) if len(values) else np.zeros(0)
    bounds = np.frombuffer(offsets, dtype=np.int64)
    return Ragged.from_rows([flat[bounds[i] : bounds[i + 1]] for i in index])


def _components(rows: Ragged, source: str, role: str) -> np.ndarray:
    widths = rows.lengths
    if len(widths) and (widths != widths[0]).any():
        raise RolloutFileError(
            f"{source}: 'reward_components' has {widths[0]} entries on the first line of role {role!r} but "
            f"{widths[widths != widths[0]][0]} on another; every line needs the same number."
        )
    return rows.values.reshape(len(widths), -1)


def _batch(
    cols: Columns, index: np.ndarray, role: str, requires: Iterable[str], source: str, resolved: Resolved
) -> AdvantageBatch:
    """One role's batch, with the kernels and fields in ``resolved``; error messages name a rollout's line."""
    rewards = np.frombuffer(cols.rewards, dtype=np.float64)[index]
    groups = np.frombuffer(cols.groups, dtype=np.int64)[index]
    fields: dict[str, Any] = {}
    for name in requires:
        if name not in OPTIONAL_FIELDS and (name in cols.numbers or name in cols.rows):
            continue  # a plugin's field: below
        if name in cols.numbers:
            fields[name] = np.frombuffer(cols.numbers[name], dtype=np.float64)[index]
        elif name == "reward_components":
            fields[name] = _components(_rows(*cols.rows[name], index), source, role)
        elif name in cols.rows:
            fields[name] = _rows(*cols.rows[name], index)
        elif name == "roles":
            fields[name] = [role] * len(index)
        elif name == "task_ids":
            fields[name] = np.array([cols.group_labels[g] for g in groups], dtype=object)

    def describe(position: int) -> str:
        return f"line {int(index[position]) + 1} of {source} (group {cols.group_labels[groups[position]]!r})"

    extra: dict[str, Any] = {}
    for name in requires:
        if name in OPTIONAL_FIELDS:
            continue
        if name in cols.numbers:
            extra[name] = np.frombuffer(cols.numbers[name], dtype=np.float64)[index]
        elif name in cols.rows:
            extra[name] = _rows(*cols.rows[name], index)
    return AdvantageBatch(
        rewards,
        groups,
        describe=describe,
        extra=extra,
        kernels=resolved.kernels,
        fields=resolved.fields,
        **fields,
    )


def estimate(
    cols: Columns, config: AlgorithmConfig, source: str, resolved: Resolved | None = None
) -> tuple[Any, dict[str, float]]:
    """Advantages in line order (a float array, or a list of per-step rows) and the summary metrics.

    Each role's batch goes through the same pipeline as every other door (reward policy, option
    checks, output checks). ``resolved`` holds what the command resolved from the plugins for
    the configured estimators (default: resolved here).
    """
    if resolved is None:
        resolved = resolve_plugins(*_configured(config))
    n = len(cols)
    roles = np.frombuffer(cols.roles, dtype=np.int64)
    rewards_all = np.frombuffer(cols.rewards, dtype=np.float64)
    advantages: Any = np.zeros(n)
    metrics: dict[str, float] = {}
    for role_id, role in enumerate(cols.role_names):
        index = np.flatnonzero(roles == role_id)
        entry = resolved.entry(config.estimator_for(role))
        batch = _batch(cols, index, role, entry.requires, source, resolved)
        outcome = estimate_role(config, role, batch, entry=entry)
        result = outcome.advantages
        if config.normalize_by_steps:
            if not isinstance(result, Ragged):
                chosen = estimator_name(config.estimator_for(role))
                raise RolloutFileError(
                    "rllm.stepwise_advantage.normalize_by_steps divides step advantages by the step count, but "
                    f"{chosen!r} gives one advantage per line; use a per-step estimator (with step_rewards) or "
                    "leave normalize_by_steps off."
                )
            result = per_step_share(result)
        good = outcome.counted(batch.layout)
        summarize(f"reward/{role}", rewards_all[index] if good is None else rewards_all[index][good], metrics)
        if isinstance(result, Ragged):
            if not isinstance(advantages, list):
                advantages = [float(a) for a in advantages]
            rows = [result.values[result.offsets[i] : result.offsets[i + 1]] for i in range(len(index))]
            for line, row in zip(index.tolist(), rows, strict=True):
                advantages[line] = row.tolist()
            kept = [row for position, row in enumerate(rows) if good is None or good[position]]
            summarize(f"advantage/{role}", np.concatenate(kept) if kept else np.zeros(0), metrics, True)
        else:
            if isinstance(advantages, list):
                for line, value in zip(index.tolist(), result.tolist(), strict=True):
                    advantages[line] = value
            else:
                advantages[index] = result
            summarize(f"advantage/{role}", result if good is None else result[good], metrics, True)
    return advantages, metrics


# -- writing ---------------------------------------------------------------------------------
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


# -- the command -----------------------------------------------------------------------------
@dataclass
class Input:
    """A re-readable input: the file itself, the bundled sample, or a temporary copy of stdin or a FIFO.

    The copy has no name in the file system (it is unlinked as it is made), so no kill, not
    even SIGKILL, can leave it behind in the temporary folder.
    """

    path: Path | None
    source: str
    copy: IO[bytes] | None = None

    def open(self) -> IO[bytes]:
        if self.copy is not None:
            self.copy.flush()
            handle = os.fdopen(os.dup(self.copy.fileno()), "rb")
            handle.seek(0)
            return handle
        if self.path is None:
            return resources.files("rllm.data").joinpath(SAMPLE).open("rb")
        try:
            return self.path.open("rb")
        except OSError as exc:
            raise RolloutFileError(f"Rollout file {self.source!r} cannot be read: {exc.strerror}.") from None

    def size(self) -> int | None:
        return None if self.path is None or self.copy is not None else self.path.stat().st_size

    def remove_copy(self) -> None:
        if self.copy is not None:
            self.copy.close()


def _input(word: str | None) -> Input:
    if word is None:
        return Input(None, SAMPLE)
    if word == "-":
        return _spool(sys.stdin.buffer, "<stdin>")
    path = Path(word)
    if not path.exists():
        raise RolloutFileError(f"Rollout file {word!r} does not exist.")
    if path.is_dir():
        raise RolloutFileError(f"Rollout file {word!r} is a folder; give a .jsonl file.")
    if not path.is_file():  # a FIFO or device can be read once only
        with Input(path, word).open() as handle:
            return _spool(handle, word)
    return Input(path, word)


def _spool(handle: IO[bytes], source: str) -> Input:
    """Copy a stream that cannot be read twice into an anonymous temporary file."""
    spool = tempfile.TemporaryFile(prefix="rllm-advantages-", suffix=".jsonl")  # noqa: SIM115 (kept open)
    try:
        read = getattr(handle, "read1", handle.read)  # what has arrived, not a full buffer's worth
        while chunk := read(1 << 16):
            spool.write(chunk)
    except BaseException:
        spool.close()
        raise
    return Input(None, source, copy=cast(IO[bytes], spool))


def run(args: argparse.Namespace) -> int:
    words = split_words(args, others_allowed=1)
    if args.estimator is not None and not args.estimator.strip():
        raise UsageError("-e/--estimator needs a name, e.g. -e grpo; `rllm estimators` lists them.")
    if args.field in _INPUT_KEYS:
        warnings.warn(
            f"--field {args.field} overwrites the input field {args.field!r} on every line; "
            "choose another name (default: advantage) to keep it.",
            RLLMWarning,
            stacklevel=1,
        )
    if args.estimator:
        words.overrides.append(f"rllm.algorithm.adv_estimator={args.estimator}")
        words.overrides.append(f"algorithm.adv_estimator={args.estimator}")
    config = AlgorithmConfig.from_config(words.load())
    with exit_on_signals():  # SIGTERM/SIGHUP still remove the copy of stdin and the temporary output
        source = _input(words.others[0] if words.others else None)
        progress = Progress(source.size())
        try:
            resolved = resolve_plugins(*_configured(config))  # once: each configured estimator, kernels, fields
            reader = Reader(source.source, config, _needed_fields(config, resolved), args.field)
            with source.open() as handle:
                for number, raw in _lines(handle, progress, "reading"):
                    reader.add(number, raw)
            cols = reader.columns
            # One call per role: numpy takes milliseconds here, while loading the numba kernels costs
            # seconds per process (bench/jsonl.py measured 2.5 s on a 30 MB file).
            # An estimator's print() goes to stderr: stdout may be the JSON Lines output.
            with numpy_only(), contextlib.redirect_stdout(sys.stderr):
                advantages, metrics = estimate(cols, config, source.source, resolved)
            with open_output(args.output) as out, source.open() as handle:
                _write(handle, out, cols, advantages, args.field, progress)
        finally:
            progress.close()
            source.remove_copy()
    report = sys.stderr if not args.output or args.output == "-" else sys.stdout
    names = sorted({estimator_name(config.estimator_for(role)) for role in cols.role_names})
    rollouts, groups = len(cols), len(cols.group_labels)
    counted = f"{rollouts} rollout{'s' * (rollouts != 1)} in {groups} group{'s' * (groups != 1)}"
    print(f"{counted}, estimator {', '.join(names)}:", file=report)
    shown = tuple(f"{kind}/{role}/" for role in cols.role_names[:SUMMARY_ROLES] for kind in ("advantage", "reward"))
    for key in sorted(k for k in metrics if k.startswith(shown)):
        print(f"  {key} = {metrics[key]:.6g}", file=report)
    if len(cols.role_names) > SUMMARY_ROLES:
        print(
            f"  ... and {len(cols.role_names) - SUMMARY_ROLES} more roles "
            f"(the summary shows the first {SUMMARY_ROLES})",
            file=report,
        )
    return 0
