"""Trajectory groups read into batches: one per role, each field read from the trajectories only when asked.

The collection step (:mod:`rllm.estimators.collect`) sorts groups by role here, reads the
rewards, and hands the batch a source for every optional field, so that a trajectory's step
rewards, response lengths or plugin-declared fields are read only for an estimator that
requires them.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from itertools import chain
from numbers import Real
from typing import Any

import numpy as np

from rllm.contract.fields import TOKEN_FIELDS, BatchField
from rllm.errors import DataError, InputFieldError, RewardError, RLLMWarning
from rllm.estimators.batch import FieldSource
from rllm.estimators.ragged import Ragged
from rllm.estimators.resolution import Resolved
from rllm.estimators.values import float_rewards
from rllm.plugins.discovery import Source
from rllm.types import Step, Trajectory, TrajectoryGroup


def _precomputed_advantages(group: TrajectoryGroup) -> list[float]:
    """The per-token advantages a workflow set itself, written back to each step as one value per token.

    A scalar is expanded over the step's response tokens and a step without one gets zeros (as
    rLLM does); a list of the wrong length is replaced by zeros on the step, with a warning. A
    NaN or infinite value, or a value that is neither a number nor a sequence of numbers, is an
    error naming the group.
    """
    values: list[float] = []
    for traj in group.trajectories:
        for index, step in enumerate(traj.steps):
            n_tokens = len(step.response_ids)
            where = f"Group {group.group_id!r}, trajectory {traj.uid!r}, step {index}"
            given = 0.0 if step.advantage is None else step.advantage
            if isinstance(given, Real) and not isinstance(given, bool):
                tokens = [float(given)] * n_tokens
            elif isinstance(given, list | tuple | np.ndarray) and np.ndim(given) == 1:
                try:
                    tokens = [float(a) for a in given]
                except (TypeError, ValueError):
                    raise DataError(f"{where}: step.advantage holds a non-number; give numbers only.") from None
                if len(tokens) != n_tokens:
                    warnings.warn(
                        f"{where} has {len(tokens)} per-token advantages for {n_tokens} response tokens; "
                        "using zeros for that step.",
                        RLLMWarning,
                        stacklevel=4,
                    )
                    tokens = [0.0] * n_tokens
            else:
                raise DataError(
                    f"{where}: step.advantage is a {type(given).__name__}; with use_precomputed_advantage it must "
                    "be a number (spread over the response tokens) or one number per response token."
                )
            if not all(map(math.isfinite, tokens)):
                raise DataError(
                    f"{where} has a NaN or infinite precomputed advantage; fix the workflow that computes it."
                )
            step.advantage = tokens
            values.extend(tokens)
    return values


def _rewards(groups: Sequence[TrajectoryGroup], per_group: list[list[Trajectory]]) -> np.ndarray:
    """Every trajectory's reward; None becomes NaN, which the reward policy handles (error, zero or exclude).

    Anything else that is not a number (a string such as ``"1.5"`` included) is refused, not converted.
    """
    rewards = [t.reward for trajectories in per_group for t in trajectories]
    try:
        values = np.array(rewards)
    except ValueError:  # nested values of different lengths: refused below, naming the trajectory
        values = np.zeros((0, 0))
    except OverflowError:  # an integer too large for a float: named below
        values = np.zeros((0, 0))
    if values.ndim == 1 and values.dtype.kind in "fiub":
        return float_rewards(values)
    for group in groups:
        for position, traj in enumerate(group.trajectories):
            reward = traj.reward
            if reward is not None and not isinstance(reward, Real):
                raise RewardError(
                    f"Trajectory {traj.uid!r} (name {traj.name!r}, position {position}) in group "
                    f"{group.group_id!r} has reward {reward!r}; a reward is a real number (or None when it "
                    "cannot be scored): strings, bytes, complex numbers and other objects are refused."
                )
    return float_rewards([np.nan if r is None else r for r in rewards])


def _steps(trajectories: list[Trajectory], read: Callable[[Step], Any]) -> Ragged | None:
    """One row per trajectory of ``read(step)``; None when some step has no value."""
    counts = np.fromiter((len(t.steps) for t in trajectories), dtype=np.intp, count=len(trajectories))
    values = [read(step) for t in trajectories for step in t.steps]
    if any(v is None for v in values):
        return None
    offsets = np.zeros(len(counts) + 1, dtype=np.intp)
    np.cumsum(counts, out=offsets[1:])
    return Ragged(values=np.asarray(values), offsets=offsets)  # converted, or refused, where the batch takes it


def _step_tokens(step: Step, name: str) -> Any:
    """A step's per-token values of field ``name``: the sampler's are its ``logprobs``, the others ``info[name]``."""
    if name == "rollout_log_probs":
        return step.logprobs or None
    return step.info.get(name)


def _tokens(trajectories: list[Trajectory], name: str) -> Ragged | None:
    """One row per trajectory of its steps' per-token values of ``name``; None when some step has none.

    A step whose values are not one per response token is an error naming the field and the trajectory.
    """
    rows = []
    for trajectory in trajectories:
        row: list[Any] = []
        for index, step in enumerate(trajectory.steps):
            if not step.response_ids:
                continue
            values = _step_tokens(step, name)
            if values is None:
                return None
            if np.ndim(values) != 1 or len(values) != len(step.response_ids):
                raise InputFieldError(
                    f"Batch field {name!r}: step {index} of trajectory {trajectory.uid!r} (name {trajectory.name!r}) "
                    f"holds {np.size(values)} values for {len(step.response_ids)} response tokens; give one per token."
                )
            row.extend(values)
        rows.append(row)
    return Ragged.from_rows(rows, None, per_token=True)  # converted, or refused, where the batch takes it


def _per_trajectory(trajectories: list[Trajectory], key: str) -> list[Any] | None:
    values = [t.info.get(key) for t in trajectories]
    return None if any(v is None for v in values) else values


def _components(trajectories: list[Trajectory]) -> np.ndarray | None:
    """``info["reward_components"]``: a sequence, or a mapping whose keys follow the first trajectory's order."""
    values = _per_trajectory(trajectories, "reward_components")
    if values is None:
        return None
    if isinstance(values[0], Mapping):
        keys = list(values[0])
        try:
            return np.array([[v[k] for k in keys] for v in values], dtype=np.float64)
        except (KeyError, TypeError) as exc:
            raise RewardError(
                f"Every trajectory's info['reward_components'] must have the keys {keys}; one lacks {exc}."
            ) from None
    return np.array(values, dtype=np.float64)


def _sources(
    groups: Sequence[TrajectoryGroup], per_group: list[list[Trajectory]], role: str, resolved: Resolved
) -> dict[str, FieldSource]:
    """Where each optional batch field lives on the trajectories; read only if an estimator asks.

    The plugin-declared fields are those the collection step resolved (``resolved.fields``).
    """

    def flat() -> list[Trajectory]:
        return list(chain.from_iterable(per_group))

    return {
        "response_lengths": lambda: [sum(len(s.response_ids) for s in t.steps) for t in flat()],
        "step_rewards": lambda: _steps(flat(), lambda step: step.reward),
        "step_values": lambda: _steps(flat(), lambda step: step.info.get("value")),
        "baseline_rewards": lambda: _per_trajectory(flat(), "baseline_reward"),
        "reward_components": lambda: _components(flat()),
        "roles": lambda: [role] * len(flat()),
        **{name: partial(_token_source, flat, name) for name in TOKEN_FIELDS},
        **{
            name: partial(_declared, name, field, resolved.field_sources[name], flat)
            for name, field in resolved.fields.items()
        },
        "task_ids": lambda: [g.group_task_id for g in groups for _ in g.trajectories],
    }


def _token_source(flat: Callable[[], list[Trajectory]], name: str) -> Ragged | None:
    return _tokens(flat(), name)


def _group_ids(groups: list[TrajectoryGroup]) -> list[str]:
    """Group labels for messages (read only when an error names a group)."""
    return [g.group_id for g in groups]


def _declared(name: str, field: BatchField, source: Source, flat: Callable[[], list[Trajectory]]) -> list[Any]:
    """A plugin-declared batch field, read from every trajectory of the batch; a failing read names both.

    ``source`` is the plugin that declared the field.
    """
    values = []
    for position, trajectory in enumerate(flat()):
        try:
            values.append(field.read(trajectory))
        except Exception as exc:  # the plugin's reader: any failure is a missing input, not a crash
            owner = source.describe()
            raise InputFieldError(
                f"Batch field {name!r} ({owner}) could not be read from trajectory {trajectory.uid!r} (name "
                f"{trajectory.name!r}, position {position} of the batch): {type(exc).__name__}: {exc}. Give "
                "every trajectory what the field reads (e.g. its info key), or fix the plugin's read()."
            ) from exc
    return values


def _describer(groups: list[TrajectoryGroup], per_group: list[list[Trajectory]]) -> Callable[[int], str]:
    """Names the trajectory at a batch position (only called to word an error)."""

    def describe(position: int) -> str:
        for group, trajectories in zip(groups, per_group, strict=True):
            if position < len(trajectories):
                traj = trajectories[position]
                return (
                    f"trajectory {traj.uid!r} (name {traj.name!r}, position {position}, reward {traj.reward!r}) "
                    f"in group {group.group_id!r}"
                )
            position -= len(trajectories)
        return f"position {position}"

    return describe


RoleBatch = tuple[list[TrajectoryGroup], list[list[Trajectory]]]


def _by_role(
    groups: list[TrajectoryGroup], check_precomputed: bool, collect_advantage: bool, precomputed: dict[str, list[float]]
) -> dict[str, RoleBatch]:
    """Groups (and their trajectory lists) per role; precomputed-advantage groups go to ``precomputed``."""
    roles: list[str] = []
    per_group: list[list[Trajectory]] = []
    add_role, add_trajectories = roles.append, per_group.append
    for group in groups:  # one visit per group object: at this scale each visit is a cache miss
        role = group.role  # set by TrajectoryGroup.for_task; the property parses group_id otherwise
        add_role(group.group_role if role is None else role)
        add_trajectories(group.trajectories)
    if roles and not check_precomputed and all(per_group) and roles.count(roles[0]) == len(roles):
        return {roles[0]: (list(groups), per_group)}  # the common case: one role, no empty group
    by_role: dict[str, RoleBatch] = {}
    for group, role, trajectories in zip(groups, roles, per_group, strict=True):
        if check_precomputed and any(step.advantage is not None for traj in trajectories for step in traj.steps):
            if collect_advantage:
                precomputed.setdefault(role, []).extend(_precomputed_advantages(group))
            continue
        if not trajectories:
            warnings.warn(f"Group {group.group_id!r} has no trajectories; skipped.", RLLMWarning, stacklevel=3)
            continue
        role_groups, role_trajectories = by_role.setdefault(role, ([], []))
        role_groups.append(group)
        role_trajectories.append(trajectories)
    return by_role


def _check_distinct(by_role: dict[str, RoleBatch]) -> None:
    """Refuse a trajectory object that sits in two groups: its reward would count twice, its steps be written twice."""
    seen: set[int] = set()
    total = 0
    for _, per_group in by_role.values():
        for trajectories in per_group:
            seen.update(map(id, trajectories))
            total += len(trajectories)
    if len(seen) == total:
        return
    owner: dict[int, str] = {}
    for groups, per_group in by_role.values():
        for group, trajectories in zip(groups, per_group, strict=True):
            for traj in trajectories:
                first = owner.setdefault(id(traj), group.group_id)
                if first is not group.group_id:
                    raise DataError(
                        f"Trajectory {traj.uid!r} is in two groups, {first!r} and {group.group_id!r}; its reward "
                        "would count twice. Put each trajectory object in one group (copy it if you mean two)."
                    )
