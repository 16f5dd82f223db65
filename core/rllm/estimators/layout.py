"""The group structure of a batch, computed once, and the segment operations over it.

The group structure (sizes, and either the runs of contiguous groups or each trajectory's
group number) is computed once here so that every estimator can do segment reductions
without a Python loop over groups.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cached_property
from itertools import pairwise
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from rllm.errors import GroupError
from rllm.estimators import acceleration
from rllm.estimators.acceleration import Kernels
from rllm.estimators.labels import _dense_groups, _label_array, _run_starts, _sorted_runs
from rllm.estimators.ragged import FloatArray, IndexArray

__all__ = ["GroupLayout"]


class GroupLayout:
    """Where each trajectory's group is, computed once from arbitrary labels.

    Groups are numbered ``0..n_groups-1`` (in order of appearance when contiguous, else by
    ascending label) and ``labels``, ``sizes`` and ``starts`` describe them. Two layouts
    cover every input:

    * contiguous (``codes is None``): every group is one run of the input, as rollouts come
      out of generation. Segment operations reduce runs in place (``reshape`` folds for
      equal sizes, ``reduceat`` for ragged ones).
    * scattered: ``codes`` holds each trajectory's group number and segment operations
      use ``bincount`` and gathers, so shuffled input is never sorted.

    All operations take and return arrays in input order. ``order`` (the stable
    permutation that makes groups contiguous, ``None`` for a contiguous layout) and
    ``starts`` (where each group begins in that order) serve per-group splitting.

    ``kernels`` are the compiled primitives the operations may use, resolved by the door
    that builds the layout (:mod:`rllm.estimators.resolution`); a layout built without
    them looks the installed ones up once, on first need.
    """

    size: int
    codes: IndexArray | None
    uniform_size: int | None
    """The common group size when all groups are equally large, else None."""

    _labels: NDArray[Any] | None
    """Group labels; None until first use when they are gathered from ``_sorted_labels`` at the run starts."""
    _sizes: IndexArray
    _sorted_labels: NDArray[np.int64] | None = None
    _unlocated = False
    """True while the runs of ``_sorted_labels`` are counted but not located (see :meth:`locate_runs`)."""
    _label_source: Callable[[], Sequence[Any]] | None = None
    """Gives the labels on first use (see :meth:`from_sizes`)."""
    _kernels: Kernels | None = None
    """The door's kernels; None until first need when the layout was built without them."""

    def __init__(self, labels: ArrayLike, kernels: Kernels | None = None) -> None:
        self._kernels = kernels
        labels = labels if isinstance(labels, np.ndarray) else _label_array(labels)
        if labels.ndim != 1:
            raise GroupError(f"Group ids must be a 1-D array, got shape {labels.shape}.")
        self.size = len(labels)
        self.codes = None
        if self.size == 0:
            self._contiguous(np.zeros(0, dtype=np.intp), labels)
        elif labels.dtype.kind in "iub" and (runs := _sorted_runs(labels, self._kernel)) is not None:
            starts, run_labels, uniform, count = runs
            if starts is None:  # sorted and ragged: a fused kernel locates the runs while it reduces them
                self._sorted_labels, self._unlocated, self._n_groups, self.uniform_size = labels, True, count, None
            else:
                self._contiguous(starts, run_labels, uniform)
        else:
            codes, group_labels, sizes = _dense_groups(labels)
            changes = codes[1:] != codes[:-1]  # codes, not labels: 1 == True, yet they are two groups
            if len(sizes) == np.count_nonzero(changes) + 1:  # every group is one run: contiguous after all
                starts = _run_starts(codes)
                self._contiguous(starts, labels[starts])
            else:
                self.codes, self._labels, self._sizes = codes, group_labels, sizes
                self._n_groups = len(sizes)
                self._set_uniform()

    def _contiguous(self, starts: IndexArray, labels: NDArray[Any] | None, uniform: int | None = None) -> None:
        self.__dict__["starts"] = starts
        self._labels = labels
        self._n_groups = len(starts)
        if uniform is not None:
            self._sizes = np.full(len(starts), uniform, dtype=np.intp)
            self.uniform_size = uniform
            return
        self._sizes = np.empty(len(starts), dtype=np.intp)
        np.subtract(starts[1:], starts[:-1], out=self._sizes[:-1])
        if len(starts):
            self._sizes[-1] = self.size - starts[-1]
        self._set_uniform()

    def _set_uniform(self) -> None:
        sizes = self._sizes
        self.uniform_size = int(sizes[0]) if len(sizes) and sizes.min() == sizes.max() else None

    @property
    def unlocated_runs(self) -> NDArray[np.int64] | None:
        """The sorted labels while their runs are not located (a kernel may locate them: :meth:`locate_runs`)."""
        return self._sorted_labels if self._unlocated else None

    def locate_runs(self, starts: IndexArray | None = None) -> None:
        """Record where the runs of sorted labels begin: given by a kernel that found them, else found now."""
        labels = self._sorted_labels
        if not self._unlocated or labels is None:
            return
        if starts is None:
            fast = self._kernel(acceleration.RUN_STARTS)
            starts = fast(labels, self._n_groups) if fast is not None else _run_starts(labels)
        self._unlocated = False
        self._contiguous(starts, None)

    @property
    def labels(self) -> NDArray[Any]:
        """Each group's label."""
        self.locate_runs()
        if self._labels is None:
            source = self._label_source
            self._labels = _label_array(source()) if source is not None else self._sorted_labels[self.starts]  # type: ignore[index]
        return self._labels

    @property
    def sizes(self) -> IndexArray:
        """Each group's number of trajectories."""
        self.locate_runs()
        return self._sizes

    @property
    def kernels(self) -> Kernels:
        """The compiled primitives this layout's operations use (the installed ones unless a door gave them)."""
        if self._kernels is None:
            self._kernels = acceleration.installed_kernels()
        return self._kernels

    def _kernel(self, name: str) -> Callable[..., Any] | None:
        return self.kernels.get(name)

    @classmethod
    def from_sizes(
        cls,
        sizes: ArrayLike,
        labels: Sequence[Any] | Callable[[], Sequence[Any]] | None = None,
        kernels: Kernels | None = None,
    ) -> GroupLayout:
        """Contiguous groups of the given sizes, labelled ``labels`` (default: ``0..n-1``); sizes must be >= 1.

        ``labels`` may be a function that gives them, called only if a label is needed (an error message).
        """
        sizes = np.asarray(sizes, dtype=np.intp).reshape(-1)
        if len(sizes) and sizes.min() < 1:
            raise GroupError("Every group needs at least one trajectory; got a group of size 0.")
        layout = cls.__new__(cls)
        layout._kernels = kernels
        layout.size = int(sizes.sum())
        layout.codes = None
        starts = np.zeros(len(sizes), dtype=np.intp)
        np.cumsum(sizes[:-1], out=starts[1:])
        if callable(labels):
            layout._contiguous(starts, None)
            layout._label_source = labels
        else:
            layout._contiguous(starts, np.arange(len(sizes)) if labels is None else _label_array(labels))
        return layout

    @property
    def n_groups(self) -> int:
        return self._n_groups

    @cached_property
    def order(self) -> IndexArray | None:
        """Stable permutation making groups contiguous (``x[order]``); None when they already are."""
        return None if self.codes is None else np.argsort(self.codes, kind="stable").astype(np.intp, copy=False)

    @cached_property
    def starts(self) -> IndexArray:
        """Where each group begins once groups are contiguous (see :attr:`order`)."""
        if self._unlocated:
            self.locate_runs()
            return self.__dict__["starts"]  # type: ignore[no-any-return]
        starts = np.zeros(self.n_groups, dtype=np.intp)
        np.cumsum(self.sizes[:-1], out=starts[1:])
        return starts

    @cached_property
    def group_index(self) -> IndexArray:
        """Dense group number of every trajectory, in input order."""
        if self.codes is not None:
            return self.codes
        return self.spread(np.arange(self.n_groups, dtype=np.intp))

    def label(self, group: int) -> Any:
        value = self.labels[group]
        return value.item() if isinstance(value, np.generic) else value

    @property
    def _run_size(self) -> int | None:
        """The group size when groups are contiguous runs of one size (reshape paths)."""
        return self.uniform_size if self.codes is None else None

    # Segment operations: ``x`` is per trajectory (input order); results are per group.
    def sum(self, x: FloatArray, dtype: Any = None) -> FloatArray:
        """Per-group sums, added in ``dtype`` (default: ``x``'s) without a full-size converted copy."""
        if self.codes is not None:
            return np.bincount(self.codes, weights=x, minlength=self.n_groups).astype(dtype or x.dtype, copy=False)
        return self._reduce(np.add, x, dtype)

    def max(self, x: FloatArray) -> FloatArray:
        if self.codes is not None:
            out = np.full(self.n_groups, -np.inf, dtype=x.dtype)
            np.maximum.at(out, self.codes, x)
            return out
        return self._reduce(np.maximum, x)

    def sum_sq(self, x: FloatArray) -> FloatArray:
        """Per-group sum of squares, without a full-size temporary where the layout allows."""
        k = self._run_size
        if k is not None:
            rows = x.reshape(-1, k)
            return np.einsum("ij,ij->i", rows, rows)
        if self.codes is not None:
            return self.sum(np.square(x))
        out = np.empty(self.n_groups, dtype=x.dtype)
        buffer = np.empty(min(self.size, 2 * _BLOCK), dtype=x.dtype)
        for g0, g1, a, b in self._blocks:
            squares = np.square(x[a:b], out=buffer[: b - a])
            out[g0:g1] = np.add.reduceat(squares, self.starts[g0:g1] - a)
        return out

    def mean(self, x: FloatArray) -> FloatArray:
        return self.sum(x) / self.sizes

    def spread(self, per_group: NDArray[Any]) -> NDArray[Any]:
        """Per-group values copied to every trajectory of the group, in input order (a fresh array)."""
        if self.codes is not None:
            return per_group.take(self.codes)
        k = self.uniform_size
        return np.repeat(per_group, k if k is not None else self.sizes)

    def scale(self, x: FloatArray, per_group: FloatArray) -> FloatArray:
        """``x *= per_group`` of each value's group, in place."""
        k = self._run_size
        if k is not None:
            rows = x.reshape(-1, k)
            np.multiply(rows, per_group[:, None], out=rows)
        elif self.codes is not None:
            x *= per_group.take(self.codes)
        else:
            for g0, g1, a, b in self._blocks:
                x[a:b] *= np.repeat(per_group[g0:g1], self.sizes[g0:g1])
        return x

    def centred(self, x: FloatArray) -> tuple[FloatArray, FloatArray]:
        """``x`` minus its group mean (a fresh array), and the group means."""
        means = self.mean(x)
        out = self.spread(means)
        return np.subtract(x, out, out=out), means

    def split(self, x: NDArray[Any]) -> list[NDArray[Any]]:
        """Per-group arrays, in group order."""
        grouped = x if self.order is None else x[self.order]
        return np.split(grouped, self.starts[1:])

    def join(self, parts: Sequence[ArrayLike], dtype: Any = np.float64) -> FloatArray:
        """Inverse of :meth:`split`: per-group arrays back to one array in input order."""
        if not parts:
            return np.zeros(0, dtype=dtype)
        flat = np.concatenate([np.asarray(p, dtype=dtype).reshape(-1) for p in parts])
        if self.order is None:
            return flat
        out = np.empty_like(flat)
        out[self.order] = flat
        return out

    @cached_property
    def _blocks(self) -> list[tuple[int, int, int, int]]:
        """Runs of whole contiguous groups of about ``_BLOCK`` values: (first group, end group, first value, end value).

        Blockwise work keeps temporaries small (cache-sized, reused) instead of one per value.
        """
        cuts = np.searchsorted(self.starts, np.arange(_BLOCK, self.size, _BLOCK))
        bounds = np.unique(np.concatenate(([0], cuts, [self.n_groups])))
        edges = np.append(self.starts, self.size)[bounds].tolist()
        groups = bounds.tolist()
        return [(g0, g1, edges[i], edges[i + 1]) for i, (g0, g1) in enumerate(pairwise(groups))]

    def _reduce(self, ufunc: np.ufunc, x: NDArray[Any], dtype: Any = None) -> NDArray[Any]:
        """Reduce contiguous runs (in ``dtype``, default ``x``'s)."""
        if self.n_groups == 0:
            return np.zeros(0, dtype=dtype or x.dtype)
        k = self.uniform_size
        if k is None:
            return ufunc.reduceat(x, self.starts, dtype=dtype)
        return _fold(ufunc, x, k, dtype)


_BLOCK = 1 << 15
"""Values per block of the blockwise segment operations (a few hundred kB: stays in cache)."""

_FOLD_COLUMNS = 16
"""Above this many columns a row reduction beats folding column by column."""


def _fold(ufunc: np.ufunc, xs: NDArray[Any], k: int, dtype: Any = None) -> NDArray[Any]:
    """Reduce every run of ``k`` consecutive values (pairwise halving, then columns), in ``dtype`` throughout."""
    if k == 1:
        return xs.astype(dtype or xs.dtype)
    while k % 2 == 0:
        xs = ufunc(xs[0::2], xs[1::2], dtype=dtype)
        k //= 2
    if k == 1:
        return xs
    rows = xs.reshape(-1, k)
    if k > _FOLD_COLUMNS:
        return ufunc.reduce(rows, axis=1, dtype=dtype)
    out = ufunc(rows[:, 0], rows[:, 1], dtype=dtype)
    for j in range(2, k):
        ufunc(out, rows[:, j], out=out)
    return out
