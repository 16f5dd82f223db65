"""Dynamic sampling: groups whose rewards barely vary carry no group-relative signal.

A group is *uniform* when the spread of its (finite) rewards is within ``tolerance``:
``spread: std`` measures the population standard deviation, ``spread: range`` max - min.
The default tolerance 0 means "all rewards equal", and any tolerance works for non-binary
rewards. A group with fewer than two finite rewards is uniform. The batch's *target* is the
number of groups its first generation round produced; the *effective batch* is the number
of non-uniform groups that reach the update. Two strategies:

``drop`` (DAPO)
    uniform groups are dropped, and further generation rounds roll out tasks drawn from the
    training set (in a seeded order independent of the data loader, skipping tasks already
    in this step) for as many tasks as groups are missing, until the batch holds ``target``
    non-uniform groups or ``max_rounds`` rounds (the first included) have run. Surplus groups
    of the last round are left out. If the cap is reached, the step trains on fewer groups.
``replace`` (POLARIS's intra-batch substitution)
    no extra generation: every uniform group is replaced by a copy of a non-uniform group of
    the same batch, drawn uniformly with replacement (a generator seeded by the step number),
    so the update always sees ``target`` groups; a batch without any non-uniform group is
    trained as it is. Copies are separate objects with the group id suffixed ``#copyN``.

The refill order's position (:class:`SamplingState`) is checkpointed, so a resumed run draws
the same tasks as an uninterrupted one.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from rllm.errors import CheckpointError, ConfigError
from rllm.types import TrajectoryGroup

Strategy = Literal["drop", "replace"]
Spread = Literal["std", "range"]


@dataclass(frozen=True)
class DynamicSamplingConfig:
    """The ``rllm.dynamic_sampling`` settings (see the module docstring)."""

    enabled: bool = False
    strategy: Strategy = "drop"
    spread: Spread = "std"
    tolerance: float = 0.0
    max_rounds: int = 3

    @classmethod
    def from_config(cls, rllm: Mapping[str, Any]) -> DynamicSamplingConfig:
        """``rllm.dynamic_sampling``; ``rllm.rejection_sample.filter_uniform_groups`` is ``enable`` with ``drop``."""
        section = rllm["dynamic_sampling"]
        rejection = rllm["rejection_sample"]
        uniform = bool(rejection.get("filter_uniform_groups", False))
        enabled = bool(section.enable) or uniform
        if enabled and bool(rejection.enable):
            raise ConfigError(
                "rllm.rejection_sample.enable (which keys on is_correct) and dynamic sampling "
                "(rllm.dynamic_sampling.enable or rllm.rejection_sample.filter_uniform_groups, which key on the "
                "rewards) filter the same groups twice; enable one of them."
            )
        if uniform and bool(section.enable) and str(section.strategy) != "drop":
            raise ConfigError(
                "rllm.rejection_sample.filter_uniform_groups=true means dynamic sampling with the drop strategy, "
                f"but rllm.dynamic_sampling.strategy={section.strategy!r}; set one of them."
            )
        return cls(
            enabled=enabled,
            strategy=str(section.strategy),  # type: ignore[arg-type]
            spread=str(section.spread),  # type: ignore[arg-type]
            tolerance=float(section.tolerance),
            max_rounds=int(section.max_rounds),
        )


def reward_spread(group: TrajectoryGroup, spread: Spread) -> float:
    """The spread of the group's finite rewards: 0 with fewer than two, and exactly 0 when all are equal (the mean
    of seven rewards of 0.1 is not 0.1, so a std from it came out at 1.4e-17, over the default tolerance 0)."""
    rewards = [float(t.reward) for t in group.trajectories if t.reward is not None and math.isfinite(t.reward)]
    if len(rewards) < 2:
        return 0.0
    low, high = min(rewards), max(rewards)
    if low == high or spread == "range":
        return high - low
    mean = math.fsum(rewards) / len(rewards)
    return math.sqrt(math.fsum((reward - mean) ** 2 for reward in rewards) / len(rewards))


def informative(groups: Sequence[TrajectoryGroup], config: DynamicSamplingConfig) -> list[bool]:
    """For each group, whether its reward spread exceeds the tolerance."""
    return [reward_spread(group, config.spread) > config.tolerance for group in groups]


@dataclass
class SamplingState:
    """Position in the refill order: which pass over the training set, and how far into it."""

    cycle: int = 0
    cursor: int = 0

    def to_json(self) -> dict[str, int]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> SamplingState:
        try:
            cycle, cursor = data["cycle"], data["cursor"]
            if type(cycle) is not int or type(cursor) is not int or cycle < 0 or cursor < 0:
                raise ValueError("not counts")
            return cls(cycle=cycle, cursor=cursor)
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointError(f"The dynamic-sampling state {data!r} is not {{cycle, cursor}}.") from exc


def refill_tasks(
    dataset: Sequence[Any], count: int, exclude: set[str], state: SamplingState, task_id: Callable[[Any, int], str]
) -> list[Any]:
    """The next ``count`` tasks of the refill order whose ids are not in ``exclude`` (fewer if none are left).

    The order is a permutation of ``dataset`` per pass, seeded by the pass number; ``state``
    advances past every task looked at.
    """
    out: list[Any] = []
    order, cycle = None, None
    for _ in range(len(dataset)):
        if len(out) == count:
            break
        if cycle != state.cycle:
            order, cycle = np.random.default_rng([7919, state.cycle]).permutation(len(dataset)), state.cycle
        index = int(order[state.cursor])  # type: ignore[index]
        state.cursor += 1
        if state.cursor == len(dataset):
            state.cycle, state.cursor = state.cycle + 1, 0
        name = task_id(dataset[index], index)
        if name not in exclude:
            exclude.add(name)
            out.append(dataset[index])
    return out


def substitute(groups: list[TrajectoryGroup], keep: list[bool], step: int) -> tuple[list[TrajectoryGroup], int]:
    """``replace``: uniform groups become copies of non-uniform ones; returns the groups and how many were copied."""
    sources = [g for g, k in zip(groups, keep, strict=True) if k]
    uniform = len(groups) - len(sources)
    if not sources or not uniform:
        return list(groups), 0
    rng = np.random.default_rng([104729, step])
    out = list(sources)
    for n, pick in enumerate(rng.integers(len(sources), size=uniform).tolist(), start=1):
        source = sources[pick]
        clone = copy.deepcopy(source)
        clone.group_id = f"{source.group_id}#copy{n}"
        out.append(clone)
    return out, uniform
