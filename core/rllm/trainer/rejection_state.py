"""The rejection-sampling state as JSON data, so a checkpoint never carries code.

Reading a checkpoint must not be able to run anything, which rules out pickle; the
accumulated groups and episodes are therefore written as plain JSON. Values that JSON
cannot hold exactly (tuples, non-finite floats, numpy arrays and scalars, dicts with
non-string keys, termination reasons) are written as tagged objects (``{"$tuple": [...]}``)
and come back as the same types. Any other object is refused when the checkpoint is
written, naming the field, rather than stored in a form that cannot be read back.

Trajectories are written once, in a table; groups and episodes refer to them by position,
so a trajectory shared by a group and its episode is one object again after loading (the
filters match them by identity).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from rllm.errors import CheckpointError
from rllm.trainer.rejection import RejectionSamplingState
from rllm.types import Episode, Step, TerminationReason, Trajectory, TrajectoryGroup

SCHEMA = 1
"""Version of the layout below; bumped when it changes incompatibly."""

_PLAIN = (type(None), bool, int, str)
_NONFINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def encode_value(value: Any, where: str) -> Any:
    """``value`` as JSON data; ``where`` names the field in the error for an unsupported type."""
    if type(value) in _PLAIN:
        return value
    if type(value) is float:
        return value if math.isfinite(value) else {"$float": repr(value)}
    if isinstance(value, TerminationReason):
        return {"$termination": value.value}
    if isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
        return {
            "$ndarray": value.dtype.str,
            "shape": list(value.shape),
            "data": encode_value(value.ravel().tolist(), where),
        }
    if isinstance(value, np.generic) and value.dtype.kind in "biuf":
        return {"$numpy": value.dtype.str, "value": encode_value(value.item(), where)}
    if type(value) is list:
        return [encode_value(item, f"{where}[{i}]") for i, item in enumerate(value)]
    if type(value) is tuple:
        return {"$tuple": [encode_value(item, f"{where}[{i}]") for i, item in enumerate(value)]}
    if type(value) is dict:
        if all(type(key) is str and not key.startswith("$") for key in value):
            return {key: encode_value(item, f"{where}[{key!r}]") for key, item in value.items()}
        return {
            "$dict": [[encode_value(k, f"{where} key"), encode_value(v, f"{where}[{k!r}]")] for k, v in value.items()]
        }
    raise CheckpointError(
        f"Cannot checkpoint the rejection-sampling state: {where} holds a {type(value).__name__}, which is not "
        "data a checkpoint can store (JSON values, tuples, numpy numbers and arrays). Keep workflow outputs to "
        "such values, or set rllm.rejection_sample.mode to batch, which accumulates nothing."
    )


def decode_value(data: Any) -> Any:
    """The inverse of :func:`encode_value`; raises ``ValueError`` on an unknown tag."""
    if isinstance(data, list):
        return [decode_value(item) for item in data]
    if not isinstance(data, dict):
        return data
    tags = [key for key in data if key.startswith("$")]
    if not tags:
        return {key: decode_value(item) for key, item in data.items()}
    tag = tags[0]
    if tag == "$float":
        return _NONFINITE[data[tag]]
    if tag == "$termination":
        return TerminationReason(data[tag])
    if tag == "$ndarray":
        return np.array(decode_value(data["data"]), dtype=np.dtype(data[tag])).reshape(data["shape"])
    if tag == "$numpy":
        return np.dtype(data[tag]).type(decode_value(data["value"]))
    if tag == "$tuple":
        return tuple(decode_value(item) for item in data[tag])
    if tag == "$dict":
        return {decode_value(key): decode_value(item) for key, item in data[tag]}
    raise ValueError(f"unknown tag {tag!r}")


def _fields(obj: Any, cls: type, where: str, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    if type(obj) is not cls:
        raise CheckpointError(
            f"Cannot checkpoint the rejection-sampling state: {where} is a {type(obj).__name__}, not a "
            f"{cls.__name__}; subclasses of the data model cannot be stored as data."
        )
    return {
        f.name: encode_value(getattr(obj, f.name), f"{where}.{f.name}")
        for f in dataclasses.fields(cls)
        if f.name not in skip
    }


def encode_rejection_state(state: RejectionSamplingState) -> dict[str, Any]:
    """What ``episode``-mode rejection sampling has accumulated, as JSON data."""
    table: dict[int, int] = {}
    trajectories: list[dict[str, Any]] = []

    def index(trajectory: Trajectory, where: str) -> int:
        if id(trajectory) not in table:
            row = _fields(trajectory, Trajectory, where, skip=("steps",))
            row["steps"] = [_fields(s, Step, f"{where}.steps[{i}]") for i, s in enumerate(trajectory.steps)]
            table[id(trajectory)] = len(trajectories)
            trajectories.append(row)
        return table[id(trajectory)]

    groups = []
    for g, group in enumerate(state.groups):
        row = _fields(group, TrajectoryGroup, f"groups[{g}]", skip=("trajectories",))
        row["trajectories"] = [index(t, f"groups[{g}].trajectories[{i}]") for i, t in enumerate(group.trajectories)]
        groups.append(row)
    episodes = []
    for e, episode in enumerate(state.episodes):
        row = _fields(episode, Episode, f"episodes[{e}]", skip=("trajectories",))
        row["trajectories"] = [index(t, f"episodes[{e}].trajectories[{i}]") for i, t in enumerate(episode.trajectories)]
        episodes.append(row)
    return {
        "schema": SCHEMA,
        "partial_tasks": state.partial_tasks,
        "batches": state.batches,
        "trajectories": trajectories,
        "groups": groups,
        "episodes": episodes,
    }


def decode_rejection_state(data: dict[str, Any]) -> RejectionSamplingState:
    """The state :func:`encode_rejection_state` wrote; ``ValueError``/``KeyError``/``TypeError`` if malformed."""
    if data.get("schema") != SCHEMA:
        raise ValueError(f"schema {data.get('schema')!r}, expected {SCHEMA}")

    def build(cls: type, row: dict[str, Any]) -> Any:
        return cls(**{key: decode_value(value) for key, value in row.items()})

    trajectories = []
    for row in data["trajectories"]:
        trajectory = build(Trajectory, {k: v for k, v in row.items() if k != "steps"})
        trajectory.steps = [build(Step, step) for step in row["steps"]]
        trajectories.append(trajectory)

    def with_trajectories(cls: type, row: dict[str, Any]) -> Any:
        obj = build(cls, {k: v for k, v in row.items() if k != "trajectories"})
        obj.trajectories = [trajectories[int(i)] for i in row["trajectories"]]
        return obj

    return RejectionSamplingState(
        groups=[with_trajectories(TrajectoryGroup, row) for row in data["groups"]],
        episodes=[with_trajectories(Episode, row) for row in data["episodes"]],
        partial_tasks=int(data["partial_tasks"]),
        batches=int(data["batches"]),
    )
