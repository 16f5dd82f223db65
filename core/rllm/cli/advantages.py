"""``rllm advantages``: add advantages to rollouts stored as JSON Lines.

One line per trajectory: a group label (``group_id``, else ``task_id``), an optional
``role``, a ``reward``, and any other fields, which are written back unchanged. All lines
are read and checked before anything is written, and an output file is replaced
atomically, so a bad line never leaves half a file.
"""

from __future__ import annotations

import argparse
import json
import sys
from importlib import resources
from pathlib import Path
from typing import IO, Any

from rllm.cli.args import add_config_arguments, command_parser, split_words
from rllm.config.algorithm import AlgorithmConfig, estimator_name
from rllm.errors import RolloutFileError
from rllm.estimators.collect import collect_reward_and_advantage_from_trajectory_groups
from rllm.io import write_atomic
from rllm.types import DEFAULT_ROLE, Step, Trajectory, TrajectoryGroup

SAMPLE = "sample_rollouts.jsonl"
GROUP_FIELDS = ("group_id", "task_id")


def add_parser(sub: Any) -> None:
    parser = command_parser(
        sub,
        "advantages",
        "compute advantages for rollouts in a JSON Lines file",
        __doc__ or "",
        ["rllm advantages rollouts.jsonl -e rloo -o scored.jsonl"],
    )
    add_config_arguments(parser, "the rollout file (.jsonl, '-' for stdin), config files and key=value overrides")
    parser.add_argument("-o", "--output", help="write the rollouts with advantages here (default: stdout)")
    parser.add_argument("-e", "--estimator", help="estimator name (overrides the config), e.g. grpo, rloo")
    parser.add_argument("--field", default="advantage", help="name of the field to add (default: advantage)")
    parser.set_defaults(run=run)


def _read_lines(handle: IO[str], source: str) -> list[dict[str, Any]]:
    records = []
    for number, line in enumerate(handle, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise RolloutFileError(f"{source}, line {number}: not valid JSON ({exc.msg}).") from exc
        if not isinstance(record, dict):
            raise RolloutFileError(f"{source}, line {number}: expected a JSON object, got {type(record).__name__}.")
        if not any(key in record for key in GROUP_FIELDS):
            raise RolloutFileError(f"{source}, line {number}: no group label; add 'group_id' or 'task_id'.")
        reward = record.get("reward")
        if reward is None or isinstance(reward, bool) or not isinstance(reward, int | float):
            raise RolloutFileError(f"{source}, line {number}: 'reward' must be a number, got {reward!r}.")
        record["_line"] = number
        records.append(record)
    return records


def _groups(records: list[dict[str, Any]], source: str) -> list[TrajectoryGroup]:
    """One group per (group label, role), in order of first appearance."""
    groups: dict[tuple[str, str], TrajectoryGroup] = {}
    for record in records:
        label = str(next(record[key] for key in GROUP_FIELDS if key in record))
        role = str(record.get("role", DEFAULT_ROLE))
        group = groups.get((label, role))
        if group is None:
            group = groups[(label, role)] = TrajectoryGroup.for_task(label, role, [])
        group.trajectories.append(
            Trajectory(uid=f"{source}:{record['_line']}", name=role, reward=float(record["reward"]), steps=[Step()])
        )
    return list(groups.values())


def _open_input(path: str | None) -> tuple[IO[str], str]:
    if path == "-":
        return sys.stdin, "<stdin>"
    if path is None:
        sample = resources.files("rllm.data").joinpath(SAMPLE)
        return sample.open("r", encoding="utf-8"), SAMPLE
    file = Path(path)
    if not file.is_file():
        raise RolloutFileError(f"Rollout file {path!r} does not exist.")
    return file.open("r", encoding="utf-8"), path


def run(args: argparse.Namespace) -> int:
    words = split_words(args, others_allowed=1)
    if args.estimator:
        words.overrides.append(f"algorithm.adv_estimator={args.estimator}")
    config = AlgorithmConfig.from_config(words.load())
    handle, source = _open_input(words.others[0] if words.others else None)
    with handle:
        records = _read_lines(handle, source)
    groups = _groups(records, source)
    metrics = collect_reward_and_advantage_from_trajectory_groups(groups, config)
    advantage_of = {t.uid: t.steps[0].advantage for g in groups for t in g.trajectories}
    lines = []
    for record in records:
        line = record.pop("_line")
        record[args.field] = advantage_of[f"{source}:{line}"]
        lines.append(json.dumps(record) + "\n")
    if args.output:
        write_atomic(Path(args.output), "".join(lines))
    else:
        sys.stdout.writelines(lines)
    report = sys.stderr if not args.output else sys.stdout
    print(
        f"{len(records)} rollouts in {len(groups)} groups, estimator {estimator_name(config.estimator)}:", file=report
    )
    for key in sorted(metrics):
        print(f"  {key} = {metrics[key]:.6g}", file=report)
    return 0
