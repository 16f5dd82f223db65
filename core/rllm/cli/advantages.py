"""``rllm advantages``: add advantages to rollouts stored as JSON Lines.

The file is read twice: once for the fields the estimator needs (memory grows with the
number of rollouts, not the size of the lines), then again to write every line back with
the advantage added. Nothing is written until every line has been checked. Reading and
writing the lines is :mod:`rllm.cli.jsonl`; the re-readable input, :mod:`rllm.cli.rollout_file`.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import warnings
from array import array
from collections.abc import Iterable
from typing import Any

import numpy as np

from rllm.cli.args import UsageError, add_config_arguments, command_parser, split_words
from rllm.cli.jsonl import GROUP_FIELDS, LINE_FIELDS, Columns, Reader, _line_fields, _lines, _write
from rllm.cli.rollout_file import SAMPLE, Progress, _input
from rllm.config.algorithm import AlgorithmConfig, estimator_name
from rllm.contract.fields import TOKEN_FIELDS
from rllm.errors import RLLMError, RLLMWarning, RolloutFileError
from rllm.estimators.batch import OPTIONAL_FIELDS, AdvantageBatch, Ragged
from rllm.estimators.collect import estimate_role, per_step_share, summarize
from rllm.estimators.compute import get_estimator
from rllm.estimators.resolution import Resolved, resolve_plugins
from rllm.io import exit_on_signals, open_output
from rllm.toolkit import numpy_only

__all__ = ["GROUP_FIELDS", "LINE_FIELDS", "SAMPLE", "SUMMARY_ROLES", "add_parser", "estimate", "run"]


SUMMARY_ROLES = 10
"""Roles the closing summary lists (in order of first appearance); more would bury the command's output."""
_INPUT_KEYS = frozenset({"reward", "role", *GROUP_FIELDS})
"""Fields the command reads that ``--field`` would overwrite."""

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


# -- estimating ------------------------------------------------------------------------------
def _configured(config: AlgorithmConfig) -> list[str]:
    """The configured estimators' names: the default and each role's."""
    return list(dict.fromkeys([estimator_name(config.estimator), *map(estimator_name, config.estimator_map.values())]))


def _needed_fields(config: AlgorithmConfig, resolved: Resolved) -> set[str]:
    """Batch fields the configured estimators (default and per role, resolved in ``resolved``) require."""
    needed: set[str] = set()
    line_fields = _line_fields(resolved.fields)
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

    extra: dict[str, Any] = {name: fields.pop(name) for name in TOKEN_FIELDS if name in fields}
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


# -- the command -----------------------------------------------------------------------------


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
            needed = _needed_fields(config, resolved)
            reader = Reader(source.source, config, needed, args.field, resolved)
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
