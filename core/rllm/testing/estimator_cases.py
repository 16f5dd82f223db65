"""The inputs an estimator's conformance checks run on: small, fixed and deliberately awkward.

Group labels of mixed types (ints, strings, tuples) in shuffled order, ragged group sizes, one
group of one, and plausible values for every batch field the estimator requires.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["Case", "cases", "shown"]


@dataclass(frozen=True)
class Case:
    """One input: rewards, group labels and the extra batch fields the estimator requires."""

    rewards: list[float]
    group_ids: list[Any]
    fields: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        extra = ", ".join(f"{k}={shown(v)}" for k, v in self.fields.items())
        return f"rewards={shown(self.rewards)}, group_ids={self.group_ids!r}" + (f", {extra}" if extra else "")

    def permuted(self, order: Sequence[int]) -> Case:
        return Case(
            [self.rewards[i] for i in order],
            [self.group_ids[i] for i in order],
            {k: np.asarray(v)[list(order)] for k, v in self.fields.items()},
        )


def shown(value: Any) -> str:
    """Numbers as a failure message shows them: four decimals, long arrays elided."""
    return np.array2string(np.asarray(value, dtype=float), precision=4, separator=", ", threshold=40)


def _synthetic_field(name: str, n: int, rng: np.random.Generator) -> Any:
    """Plausible values of a batch field for ``n`` trajectories (any unknown field: one number each)."""
    if name == "response_lengths":
        return rng.integers(1, 40, n).astype(float)
    if name == "reward_components":
        return rng.random((n, 2))
    if name in ("roles", "task_ids"):
        return np.array([f"r{i % 2}" for i in range(n)])
    return rng.random(n)


def cases(requires: Sequence[str] = (), seed: int = 0) -> list[Case]:
    """The inputs every check uses: mixed label types, shuffled, ragged sizes, one group of one."""
    rng = np.random.default_rng(seed)
    labels: list[Any] = [7] * 4 + ["q:1"] * 3 + [("t", 2)] * 5 + [-1] * 2 + ["alone"]
    order = rng.permutation(len(labels))
    ids = [labels[i] for i in order]
    rewards = [float(round(x, 3)) for x in rng.normal(0.5, 1.0, len(ids))]
    binary = [float(x) for x in rng.integers(0, 2, len(ids))]
    binary[:2] = [1.0, 0.0]
    found = []
    for values in (rewards, binary):
        fields = {name: _synthetic_field(name, len(ids), rng) for name in requires}
        found.append(Case(values, ids, fields))
    return found
