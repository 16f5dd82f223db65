"""The one input every estimator receives: flat per-trajectory arrays plus group structure.

Rewards and optional fields are 1-D arrays in the caller's order; the group structure
(dense group index, sizes, a sorting permutation when groups are not contiguous) is
computed once here so that every estimator can do segment reductions without a Python
loop over groups.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from rllm.errors import GroupError, MissingInputError
from rllm.plugins.hookspecs import OPTIONAL_FIELDS

__all__ = ["OPTIONAL_FIELDS", "AdvantageBatch", "GroupLayout", "Ragged"]

FloatArray = NDArray[np.floating[Any]]
IndexArray = NDArray[np.intp]


@dataclass(frozen=True)
class Ragged:
    """Variable-length rows (e.g. per-step rewards): row ``i`` is ``values[offsets[i]:offsets[i+1]]``."""

    values: FloatArray
    offsets: IndexArray

    @classmethod
    def from_rows(cls, rows: Sequence[ArrayLike], dtype: Any = np.float64) -> Ragged:
        lengths = np.fromiter((len(row) for row in rows), dtype=np.intp, count=len(rows))  # type: ignore[arg-type]
        offsets = np.zeros(len(rows) + 1, dtype=np.intp)
        np.cumsum(lengths, out=offsets[1:])
        values = (
            np.concatenate([np.asarray(row, dtype=dtype) for row in rows])
            if len(rows)
            else np.zeros(0, dtype=dtype)
        )
        return cls(values=values, offsets=offsets)

    @property
    def lengths(self) -> IndexArray:
        return np.diff(self.offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def rows(self) -> list[FloatArray]:
        return np.split(self.values, self.offsets[1:-1])


class GroupLayout:
    """Where each trajectory's group is, computed once from arbitrary labels.

    Groups are numbered ``0..n_groups-1``. When every group is one contiguous run of the
    input (rollouts in group order), ``order`` is ``None`` and segment operations work on
    the input directly; otherwise ``order`` is a stable permutation that makes them so.
    """

    def __init__(self, labels: ArrayLike) -> None:
        labels = np.asarray(labels)
        if labels.ndim != 1:
            raise GroupError(f"Group ids must be a 1-D array, got shape {labels.shape}.")
        n = len(labels)
        self.size = n
        if n == 0:
            self.order: IndexArray | None = None
            self.starts = np.zeros(0, dtype=np.intp)
            self.sizes = np.zeros(0, dtype=np.intp)
            self.labels = labels
            return
        run_starts = np.flatnonzero(labels[1:] != labels[:-1]) + 1
        starts = np.concatenate(([0], run_starts)).astype(np.intp, copy=False)
        run_labels = labels[starts]
        if _all_distinct(run_labels):
            self.order = None
            self.starts = starts
            self.labels = run_labels
        else:
            uniq, inverse = np.unique(labels, return_inverse=True)
            inverse = inverse.reshape(-1)
            self.order = np.argsort(inverse, kind="stable").astype(np.intp, copy=False)
            counts = np.bincount(inverse, minlength=len(uniq))
            self.starts = np.concatenate(([0], np.cumsum(counts[:-1]))).astype(np.intp, copy=False)
            self.labels = uniq
            self.__dict__["group_index"] = inverse.astype(np.intp, copy=False)
        self.sizes = np.diff(np.append(self.starts, n))

    @classmethod
    def from_sizes(cls, sizes: ArrayLike) -> GroupLayout:
        """Contiguous groups of the given sizes (group ``g`` is labelled ``g``); sizes must be >= 1."""
        layout = cls.__new__(cls)
        layout.sizes = np.asarray(sizes, dtype=np.intp)
        layout.starts = np.zeros(len(layout.sizes), dtype=np.intp)
        np.cumsum(layout.sizes[:-1], out=layout.starts[1:])
        layout.size = int(layout.sizes.sum())
        layout.order = None
        layout.labels = np.arange(len(layout.sizes))
        return layout

    @property
    def n_groups(self) -> int:
        return len(self.starts)

    @cached_property
    def group_index(self) -> IndexArray:
        """Dense group number of every trajectory, in input order."""
        return np.repeat(np.arange(self.n_groups, dtype=np.intp), self.sizes)

    @cached_property
    def uniform_size(self) -> int | None:
        """The common group size when all groups are equally large and contiguous."""
        if self.order is None and self.n_groups and self.sizes.min() == self.sizes.max():
            return int(self.sizes[0])
        return None

    def label(self, group: int) -> Any:
        value = self.labels[group]
        return value.item() if isinstance(value, np.generic) else value

    # Segment operations. ``x`` is per trajectory (input order); results are per group.
    def sum(self, x: FloatArray) -> FloatArray:
        if self.n_groups == 0:
            return np.zeros(0, dtype=x.dtype)
        k = self.uniform_size
        if k is not None:
            return x.reshape(-1, k).sum(axis=1)
        sorted_x = x if self.order is None else x[self.order]
        return np.add.reduceat(sorted_x, self.starts)

    def mean(self, x: FloatArray) -> FloatArray:
        return self.sum(x) / self.sizes

    def spread(self, per_group: NDArray[Any]) -> NDArray[Any]:
        """Per-group values copied to every trajectory of the group, in input order."""
        if self.order is None:
            return np.repeat(per_group, self.sizes)
        return per_group[self.group_index]

    def centred(self, x: FloatArray) -> tuple[FloatArray, FloatArray]:
        """``x`` minus its group mean, and the group means."""
        means = self.mean(x)
        return x - self.spread(means), means

    def sum_sq_dev(self, centred: FloatArray) -> FloatArray:
        """Per-group sum of squared deviations, from already centred values (two-pass variance)."""
        return self.sum(centred * centred)

    def split(self, x: NDArray[Any]) -> list[NDArray[Any]]:
        """Per-group arrays, in group order."""
        sorted_x = x if self.order is None else x[self.order]
        return np.split(sorted_x, self.starts[1:])

    def join(self, parts: Sequence[ArrayLike], dtype: Any = np.float64) -> FloatArray:
        """Inverse of :meth:`split`: per-group arrays back to one array in input order."""
        flat = np.concatenate([np.asarray(p, dtype=dtype).reshape(-1) for p in parts]) if parts else None
        if flat is None:
            return np.zeros(0, dtype=dtype)
        if self.order is None:
            return flat
        out = np.empty_like(flat)
        out[self.order] = flat
        return out


def _all_distinct(run_labels: NDArray[Any]) -> bool:
    if len(run_labels) < 2:
        return True
    if run_labels.dtype.kind in "iuf":
        steps = run_labels[1:] > run_labels[:-1]
        if steps.all():
            return True
    return len(np.unique(run_labels)) == len(run_labels)


class AdvantageBatch:
    """Rewards of many trajectories with their groups and any extra per-trajectory inputs.

    Estimators read fields through :meth:`require`, which names the missing field and the
    estimator when a caller did not supply it.
    """

    def __init__(
        self,
        rewards: ArrayLike,
        group_ids: ArrayLike | GroupLayout,
        *,
        dtype: Any = np.float64,
        response_lengths: ArrayLike | None = None,
        baseline_rewards: ArrayLike | None = None,
        reward_components: ArrayLike | None = None,
        component_weights: ArrayLike | None = None,
        step_rewards: Ragged | Sequence[ArrayLike] | None = None,
        step_values: Ragged | Sequence[ArrayLike] | None = None,
        roles: ArrayLike | None = None,
        task_ids: ArrayLike | None = None,
    ) -> None:
        self.rewards: FloatArray = np.asarray(rewards, dtype=dtype)
        if self.rewards.ndim != 1:
            raise GroupError(f"Rewards must be a 1-D array, got shape {self.rewards.shape}.")
        self.layout = group_ids if isinstance(group_ids, GroupLayout) else GroupLayout(group_ids)
        n = len(self.rewards)
        if self.layout.size != n:
            raise GroupError(
                f"Got {n} rewards but {self.layout.size} group ids; give exactly one group id per reward."
            )
        self.dtype = np.dtype(dtype)
        self.response_lengths = _per_item(response_lengths, n, "response_lengths", dtype)
        self.baseline_rewards = _per_item(baseline_rewards, n, "baseline_rewards", dtype)
        self.reward_components = _components(reward_components, n, dtype)
        self.component_weights = None if component_weights is None else np.asarray(component_weights, dtype)
        self.step_rewards = _ragged(step_rewards, n, "step_rewards", dtype)
        self.step_values = _ragged(step_values, n, "step_values", dtype)
        self.roles = None if roles is None else _per_item(roles, n, "roles", None)
        self.task_ids = None if task_ids is None else _per_item(task_ids, n, "task_ids", None)

    def __len__(self) -> int:
        return len(self.rewards)

    @property
    def n_groups(self) -> int:
        return self.layout.n_groups

    def require(self, name: str, estimator: str) -> Any:
        value = getattr(self, name, None)
        if value is None:
            raise MissingInputError(
                f"Estimator {estimator!r} needs the input {name!r}, which this batch does not have. "
                f"Pass {name}=... to rllm.compute_advantages, or fill it from the trajectories "
                "(see docs/estimators.md)."
            )
        return value


def _per_item(values: ArrayLike | None, n: int, name: str, dtype: Any) -> NDArray[Any] | None:
    if values is None:
        return None
    array = np.asarray(values, dtype=dtype)
    if array.shape != (n,):
        raise GroupError(f"{name} must have one entry per reward ({n}), got shape {array.shape}.")
    return array


def _components(values: ArrayLike | None, n: int, dtype: Any) -> FloatArray | None:
    if values is None:
        return None
    array = np.asarray(values, dtype=dtype)
    if array.ndim != 2 or array.shape[0] != n:
        raise GroupError(f"reward_components must have shape (n_rewards={n}, n_components), got {array.shape}.")
    return array


def _ragged(values: Ragged | Sequence[ArrayLike] | None, n: int, name: str, dtype: Any) -> Ragged | None:
    if values is None:
        return None
    ragged = values if isinstance(values, Ragged) else Ragged.from_rows(values, dtype=dtype)
    if len(ragged) != n:
        raise GroupError(f"{name} must have one row per reward ({n}), got {len(ragged)} rows.")
    return ragged
