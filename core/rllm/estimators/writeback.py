"""Advantages back onto the steps, or kept as arrays per role for backends that read arrays.

Writing every step is most of the collection step's cost, so these loops do no more per step
than the write and the check for a value already there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from itertools import chain

import numpy as np

from rllm.errors import EstimatorOutputError
from rllm.estimators.ragged import FloatArray, IndexArray, Ragged
from rllm.types import Trajectory


def _broadcast(per_group: list[list[Trajectory]], advantages: list[float]) -> int:
    """Set every step's advantage to its trajectory's; returns how many precomputed values it replaced.

    One flat loop over trajectories (chained in C) with the check and the write on the same
    step: this loop is most of the collection's cost, so it does no more per step than that.
    """
    replaced = 0
    for traj, advantage in zip(chain.from_iterable(per_group), advantages, strict=True):
        for step in traj.steps:
            if step.advantage is not None:
                replaced += 1
            step.advantage = advantage
    return replaced


def _divide_by_steps(per_group: list[list[Trajectory]], advantages: FloatArray | Ragged) -> Ragged:
    """``normalize_by_steps``: every step's advantage divided by its trajectory's number of steps.

    A trajectory-level advantage first goes to each of its steps, so the result is always per step.
    """
    trajectories = list(chain.from_iterable(per_group))
    counts = np.fromiter((len(t.steps) for t in trajectories), dtype=np.intp, count=len(trajectories))
    if isinstance(advantages, Ragged) and advantages.per_token:  # a token's share: its trajectory's step count
        steps = np.repeat(np.maximum(counts, 1), advantages.lengths)
        return advantages.with_values(advantages.values / steps)
    if not isinstance(advantages, Ragged):
        offsets = np.zeros(len(counts) + 1, dtype=np.intp)
        np.cumsum(counts, out=offsets[1:])
        advantages = Ragged(values=np.repeat(advantages, counts), offsets=offsets)
    return per_step_share(advantages)


def per_step_share(advantages: Ragged) -> Ragged:
    """Each row's values divided by the row's length (``normalize_by_steps`` on per-step advantages)."""
    lengths = advantages.lengths
    return advantages.with_values(advantages.values / np.repeat(np.maximum(lengths, 1), lengths))


def _per_step(per_group: list[list[Trajectory]], advantages: Ragged, name: str) -> int:
    """Give every step its own advantage; returns how many precomputed values it replaced."""
    trajectories = list(chain.from_iterable(per_group))
    if advantages.per_token:
        return _per_token(trajectories, advantages, name)
    counts = np.fromiter((len(t.steps) for t in trajectories), dtype=np.intp, count=len(trajectories))
    if not np.array_equal(counts, advantages.lengths):
        raise EstimatorOutputError(
            f"Estimator {name!r} returned per-step advantages whose rows do not match the trajectories' steps."
        )
    values = iter(advantages.values.tolist())
    replaced = 0
    for traj in trajectories:
        for step in traj.steps:
            if step.advantage is not None:
                replaced += 1
            step.advantage = next(values)
    return replaced


def _per_token(trajectories: list[Trajectory], advantages: Ragged, name: str) -> int:
    """Give every step the advantages of its response tokens (a list); returns how many values it replaced."""
    tokens = [sum(len(step.response_ids) for step in t.steps) for t in trajectories]
    if not np.array_equal(np.asarray(tokens, dtype=np.intp), advantages.lengths):
        raise EstimatorOutputError(
            f"Estimator {name!r} returned per-token advantages whose rows do not match the trajectories' response "
            "tokens."
        )
    values = advantages.values.tolist()
    at, replaced = 0, 0
    for traj in trajectories:
        for step in traj.steps:
            if step.advantage is not None:
                replaced += 1
            n = len(step.response_ids)
            step.advantage = values[at : at + n]
            at += n
    return replaced


@dataclass
class RoleAdvantages:
    """One role's advantages in batch order, for backends that take arrays rather than Step objects."""

    per_group: list[list[Trajectory]]
    """The role's trajectories, group by group, in batch order."""
    advantages: FloatArray | Ragged
    """One per trajectory, or (per-step estimators) one row of step advantages per trajectory (per-token
    estimators: one row of token advantages, ``per_token`` set)."""
    verify: Callable[[], None] = lambda: None
    """Refuses a trajectory object found in two groups; run before the arrays are first used."""

    @cached_property
    def trajectories(self) -> list[Trajectory]:
        """The trajectories in batch order: ``advantages[i]`` belongs to ``trajectories[i]``."""
        self.verify()
        return list(chain.from_iterable(self.per_group))

    def per_step(self) -> tuple[FloatArray, IndexArray]:
        """Every step's advantage, trajectory by trajectory, and the index of each step's trajectory."""
        self.verify()
        if isinstance(self.advantages, Ragged) and self.advantages.per_token:
            raise EstimatorOutputError(
                "The estimator gave per-token advantages; read them per token (advantages.values, row by "
                "trajectory), not per step."
            )
        if isinstance(self.advantages, Ragged):
            counts = self.advantages.lengths
            values = self.advantages.values
        else:
            trajectories = self.trajectories
            counts = np.fromiter((len(t.steps) for t in trajectories), dtype=np.intp, count=len(trajectories))
            values = np.repeat(self.advantages, counts)
        return values, np.repeat(np.arange(len(counts)), counts)
