"""The one input every estimator receives: flat per-trajectory arrays plus group structure.

Rewards and optional fields are 1-D arrays in the caller's order (per-step fields are
:class:`Ragged`, one row per trajectory); the group structure (sizes, run starts, a
sorting permutation when groups are not contiguous) is computed once here so that every
estimator can do segment reductions without a Python loop over groups.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import pairwise
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
            np.concatenate([np.asarray(row, dtype=dtype) for row in rows]) if len(rows) else np.zeros(0, dtype=dtype)
        )
        return cls(values=values, offsets=offsets)

    @property
    def lengths(self) -> IndexArray:
        return np.diff(self.offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def rows(self) -> list[FloatArray]:
        return np.split(self.values, self.offsets[1:-1])

    def expand(self, per_row: NDArray[Any]) -> NDArray[Any]:
        """One value per row copied to each of the row's entries (a trajectory's value to its steps)."""
        return np.repeat(per_row, self.lengths)

    def with_values(self, values: FloatArray) -> Ragged:
        """Other values with the same rows."""
        return Ragged(values=values, offsets=self.offsets)


class GroupLayout:
    """Where each trajectory's group is, computed once from arbitrary labels.

    Groups are numbered ``0..n_groups-1`` in *group order*: the order in which every group
    is one contiguous run. ``order`` is ``None`` when the input already is in group order
    (rollouts as generated); otherwise it is the stable permutation that makes it so
    (``x[order]`` is in group order). ``starts`` and ``sizes`` describe the runs.

    Kernels work in group order (:meth:`gather`, segment reductions, :meth:`expand`,
    :meth:`scatter`); :meth:`sum`, :meth:`mean`, :meth:`spread` and :meth:`centred` are
    the same operations on arrays in input order.
    """

    order: IndexArray | None
    starts: IndexArray
    sizes: IndexArray
    labels: NDArray[Any]
    size: int
    uniform_size: int | None
    """The common group size when all groups are equally large, else None."""

    def __init__(self, labels: ArrayLike) -> None:
        labels = np.asarray(labels)
        if labels.ndim != 1:
            raise GroupError(f"Group ids must be a 1-D array, got shape {labels.shape}.")
        self.size = n = len(labels)
        self.order = None
        if n == 0:
            self._set_runs(np.zeros(0, dtype=np.intp), labels)
        elif labels.dtype.kind in "iub" and _non_decreasing(labels):
            self._from_sorted(labels)
        else:
            starts = _run_starts(labels)
            if _all_distinct(labels[starts]):
                self._set_runs(starts, labels[starts])
            else:
                self.order, ordered = _stable_order(labels)
                grouped = labels[self.order]
                if ordered:
                    self._from_sorted(grouped)
                else:
                    starts = _run_starts(grouped)
                    self._set_runs(starts, grouped[starts])

    def _from_sorted(self, sorted_labels: NDArray[Any]) -> None:
        """Runs of non-decreasing labels; equal-length runs are found without a full scan."""
        k = _uniform_run(sorted_labels)
        if k is not None:
            self._set_runs(np.arange(0, len(sorted_labels), k, dtype=np.intp), sorted_labels[::k], k)
        else:
            starts = _run_starts(sorted_labels)
            self._set_runs(starts, sorted_labels[starts])

    def _set_runs(self, starts: IndexArray, labels: NDArray[Any], uniform: int | None = None) -> None:
        self.starts = starts
        self.labels = labels
        if uniform is not None:
            self.sizes = np.full(len(starts), uniform, dtype=np.intp)
        else:
            self.sizes = np.empty(len(starts), dtype=np.intp)
            np.subtract(starts[1:], starts[:-1], out=self.sizes[:-1])
            if len(starts):
                self.sizes[-1] = self.size - starts[-1]
            if len(starts) and self.sizes.min() == self.sizes.max():
                uniform = int(self.sizes[0])
        self.uniform_size = uniform

    @classmethod
    def from_sizes(cls, sizes: ArrayLike) -> GroupLayout:
        """Contiguous groups of the given sizes (group ``g`` is labelled ``g``); sizes must be >= 1."""
        sizes = np.asarray(sizes, dtype=np.intp).reshape(-1)
        if len(sizes) and sizes.min() < 1:
            raise GroupError("Every group needs at least one trajectory; got a group of size 0.")
        layout = cls.__new__(cls)
        layout.size = int(sizes.sum())
        layout.order = None
        starts = np.zeros(len(sizes), dtype=np.intp)
        np.cumsum(sizes[:-1], out=starts[1:])
        layout._set_runs(starts, np.arange(len(sizes)))
        return layout

    @property
    def n_groups(self) -> int:
        return len(self.starts)

    @cached_property
    def group_index(self) -> IndexArray:
        """Dense group number of every trajectory, in input order."""
        return self.scatter(self.expand(np.arange(self.n_groups, dtype=np.intp)))

    def label(self, group: int) -> Any:
        value = self.labels[group]
        return value.item() if isinstance(value, np.generic) else value

    # Moving between input order and group order.
    def gather(self, x: NDArray[Any]) -> NDArray[Any]:
        """``x`` (input order) in group order; ``x`` itself when it already is, so never write into it."""
        return x if self.order is None else x[self.order]

    def scatter(self, y: NDArray[Any]) -> NDArray[Any]:
        """Inverse of :meth:`gather`: ``y`` (group order) back to input order."""
        if self.order is None:
            return y
        out = np.empty_like(y)
        out[self.order] = y
        return out

    def expand(self, per_group: NDArray[Any]) -> NDArray[Any]:
        """Per-group values repeated over each group's trajectories, in group order."""
        k = self.uniform_size
        return np.repeat(per_group, k if k is not None else self.sizes)

    # Segment reductions of arrays in group order.
    def group_sum(self, xs: NDArray[Any]) -> NDArray[Any]:
        return self._reduce(np.add, xs)

    def group_max(self, xs: NDArray[Any]) -> NDArray[Any]:
        return self._reduce(np.maximum, xs)

    def group_sum_sq(self, xs: FloatArray) -> FloatArray:
        """Per-group sum of squares of ``xs`` (group order) without a full-size temporary."""
        k = self.uniform_size
        if k is not None:
            rows = xs.reshape(-1, k)
            return np.einsum("ij,ij->i", rows, rows)
        out = np.empty(self.n_groups, dtype=xs.dtype)
        buffer = np.empty(min(self.size, 2 * _BLOCK), dtype=xs.dtype)
        for g0, g1, a, b in self._blocks:
            squares = np.square(xs[a:b], out=buffer[: b - a])
            out[g0:g1] = np.add.reduceat(squares, self.starts[g0:g1] - a)
        return out

    def scale_groups(self, xs: FloatArray, per_group: FloatArray) -> FloatArray:
        """``xs *= per_group`` of each value's group, in place (``xs`` in group order)."""
        k = self.uniform_size
        if k is not None:
            rows = xs.reshape(-1, k)
            np.multiply(rows, per_group[:, None], out=rows)
            return xs
        for g0, g1, a, b in self._blocks:
            xs[a:b] *= np.repeat(per_group[g0:g1], self.sizes[g0:g1])
        return xs

    @cached_property
    def _blocks(self) -> list[tuple[int, int, int, int]]:
        """Runs of whole groups of about ``_BLOCK`` values: (first group, end group, first value, end value).

        Blockwise work keeps temporaries small (cache-sized, reused) instead of one per value.
        """
        cuts = np.searchsorted(self.starts, np.arange(_BLOCK, self.size, _BLOCK))
        bounds = np.unique(np.concatenate(([0], cuts, [self.n_groups])))
        edges = np.append(self.starts, self.size)[bounds].tolist()
        groups = bounds.tolist()
        return [(g0, g1, edges[i], edges[i + 1]) for i, (g0, g1) in enumerate(pairwise(groups))]

    def _reduce(self, ufunc: np.ufunc, xs: NDArray[Any]) -> NDArray[Any]:
        if self.n_groups == 0:
            return np.zeros(0, dtype=xs.dtype)
        k = self.uniform_size
        if k is None:
            return ufunc.reduceat(xs, self.starts)
        return _fold(ufunc, xs, k)

    # The same operations on arrays in input order.
    def sum(self, x: FloatArray) -> FloatArray:
        return self.group_sum(self.gather(x))

    def mean(self, x: FloatArray) -> FloatArray:
        return self.sum(x) / self.sizes

    def spread(self, per_group: NDArray[Any]) -> NDArray[Any]:
        """Per-group values copied to every trajectory of the group, in input order."""
        return self.scatter(self.expand(per_group))

    def centred(self, x: FloatArray) -> tuple[FloatArray, FloatArray]:
        """``x`` minus its group mean, and the group means."""
        means = self.mean(x)
        return x - self.spread(means), means

    def sum_sq_dev(self, centred: FloatArray) -> FloatArray:
        """Per-group sum of squared deviations, from already centred values (two-pass variance)."""
        return self.sum(centred * centred)

    def split(self, x: NDArray[Any]) -> list[NDArray[Any]]:
        """Per-group arrays, in group order."""
        return np.split(self.gather(x), self.starts[1:])

    def join(self, parts: Sequence[ArrayLike], dtype: Any = np.float64) -> FloatArray:
        """Inverse of :meth:`split`: per-group arrays back to one array in input order."""
        if not parts:
            return np.zeros(0, dtype=dtype)
        return self.scatter(np.concatenate([np.asarray(p, dtype=dtype).reshape(-1) for p in parts]))


_BLOCK = 1 << 15
"""Values per block of the blockwise segment operations (a few hundred kB: stays in cache)."""

_FOLD_COLUMNS = 16
"""Above this many columns a row reduction beats folding column by column."""


def _fold(ufunc: np.ufunc, xs: NDArray[Any], k: int) -> NDArray[Any]:
    """Reduce every run of ``k`` consecutive values (pairwise halving, then columns)."""
    if k == 1:
        return xs.copy()
    while k % 2 == 0:
        xs = ufunc(xs[0::2], xs[1::2])
        k //= 2
    if k == 1:
        return xs
    rows = xs.reshape(-1, k)
    if k > _FOLD_COLUMNS:
        return ufunc.reduce(rows, axis=1)
    out = ufunc(rows[:, 0], rows[:, 1])
    for j in range(2, k):
        ufunc(out, rows[:, j], out=out)
    return out


def _non_decreasing(labels: NDArray[Any]) -> bool:
    return bool(np.all(labels[1:] >= labels[:-1]))


def _run_starts(labels: NDArray[Any]) -> IndexArray:
    starts = np.flatnonzero(labels[1:] != labels[:-1])
    starts += 1
    return np.concatenate((np.zeros(1, dtype=np.intp), starts)).astype(np.intp, copy=False)


def _uniform_run(sorted_labels: NDArray[Any]) -> int | None:
    """The common run length when non-decreasing labels form runs of one length.

    Only the first run and every run's first and last label are read: with sorted labels,
    a run whose first and last labels agree is constant.
    """
    n = len(sorted_labels)
    first = sorted_labels[0]
    probe = 64
    while True:
        head = sorted_labels[:probe]
        change = np.flatnonzero(head != first)
        if len(change) or probe >= n:
            break
        probe *= 8
    k = int(change[0]) if len(change) else n
    if n % k:
        return None
    heads, tails = sorted_labels[::k], sorted_labels[k - 1 :: k]
    if not np.array_equal(heads, tails) or not np.all(heads[1:] > heads[:-1]):
        return None
    return k


def _stable_order(labels: NDArray[Any]) -> tuple[IndexArray, bool]:
    """The stable permutation that puts equal labels next to each other, and whether it also sorts them."""
    try:
        return np.argsort(labels, kind="stable").astype(np.intp, copy=False), True
    except TypeError:  # labels of mixed, unorderable types: number them by first appearance
        codes: dict[Any, int] = {}
        first_seen = (codes.setdefault(v, len(codes)) for v in labels.tolist())
        dense = np.fromiter(first_seen, dtype=np.intp, count=len(labels))
        return np.argsort(dense, kind="stable").astype(np.intp, copy=False), False


def _all_distinct(run_labels: NDArray[Any]) -> bool:
    if len(run_labels) < 2:
        return True
    if run_labels.dtype.kind in "iuf" and np.all(run_labels[1:] > run_labels[:-1]):
        return True
    try:
        return len(np.unique(run_labels)) == len(run_labels)
    except TypeError:  # mixed, unorderable labels
        return len(set(run_labels.tolist())) == len(run_labels)


FieldSource = Callable[[], Any]
"""Produces a batch field on first use (the collection step reads trajectories only when asked)."""


class AdvantageBatch:
    """Rewards of many trajectories with their groups and any extra per-trajectory inputs.

    Estimators read fields through :meth:`require`, which names the missing field and the
    estimator when a caller did not supply it. A field may also come from ``sources``, a
    mapping from field name to a function that builds it on first access, so that inputs
    nobody asks for cost nothing.
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
        sources: Mapping[str, FieldSource] | None = None,
    ) -> None:
        self.rewards: FloatArray = np.asarray(rewards, dtype=dtype)
        if self.rewards.ndim != 1:
            raise GroupError(f"Rewards must be a 1-D array, got shape {self.rewards.shape}.")
        self.layout = group_ids if isinstance(group_ids, GroupLayout) else GroupLayout(group_ids)
        n = len(self.rewards)
        if self.layout.size != n:
            raise GroupError(f"Got {n} rewards but {self.layout.size} group ids; give exactly one group id per reward.")
        self.dtype = np.dtype(dtype)
        given = {
            "response_lengths": response_lengths,
            "baseline_rewards": baseline_rewards,
            "reward_components": reward_components,
            "component_weights": component_weights,
            "step_rewards": step_rewards,
            "step_values": step_values,
            "roles": roles,
            "task_ids": task_ids,
        }
        self._sources = {k: v for k, v in (sources or {}).items() if given.get(k) is None}
        unknown = sorted(set(self._sources) - set(given))
        if unknown:
            raise GroupError(f"Unknown batch field(s) {', '.join(unknown)}; known: {', '.join(OPTIONAL_FIELDS)}.")
        for name, value in given.items():
            if name not in self._sources:
                setattr(self, name, self._checked(name, value))

    def _checked(self, name: str, value: Any) -> Any:
        if value is None:
            return None
        n = len(self.rewards)
        if name == "reward_components":
            return _components(value, n, self.dtype)
        if name == "component_weights":
            return np.asarray(value, dtype=self.dtype).reshape(-1)
        if name in ("step_rewards", "step_values"):
            return _ragged(value, n, name, self.dtype)
        return _per_item(value, n, name, None if name in ("roles", "task_ids") else self.dtype)

    def __getattr__(self, name: str) -> Any:
        # Only reached for fields left to a source: build them once, on first use.
        sources = self.__dict__.get("_sources", {})
        if name not in sources:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        value = self._checked(name, sources.pop(name)())
        setattr(self, name, value)
        return value

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


def _per_item(values: ArrayLike, n: int, name: str, dtype: Any) -> NDArray[Any]:
    array = np.asarray(values, dtype=dtype)
    if array.shape != (n,):
        raise GroupError(f"{name} must have one entry per reward ({n}), got shape {array.shape}.")
    return array


def _components(values: ArrayLike, n: int, dtype: Any) -> FloatArray:
    array = np.asarray(values, dtype=dtype)
    if array.ndim != 2 or array.shape[0] != n:
        raise GroupError(f"reward_components must have shape (n_rewards={n}, n_components), got {array.shape}.")
    return array


def _ragged(values: Ragged | Sequence[ArrayLike], n: int, name: str, dtype: Any) -> Ragged:
    ragged = values if isinstance(values, Ragged) else Ragged.from_rows(values, dtype=dtype)
    if len(ragged) != n:
        raise GroupError(f"{name} must have one row per reward ({n}), got {len(ragged)} rows.")
    return ragged
