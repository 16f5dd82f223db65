"""The one input every estimator receives: flat per-trajectory arrays plus group structure.

Rewards and optional fields are 1-D arrays in the caller's order (per-step fields are
:class:`Ragged`, one row per trajectory); the group structure (sizes, and either the runs
of contiguous groups or each trajectory's group number) is computed once here so that
every estimator can do segment reductions without a Python loop over groups.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property, partial
from itertools import pairwise
from numbers import Real
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from rllm.errors import GroupError, InputFieldError, MissingInputError, RewardError
from rllm.estimators import acceleration
from rllm.plugins.fields import BUILTIN_FIELDS, BatchField
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
    _label_source: Callable[[], Sequence[Any]] | None = None
    """Gives the labels on first use (see :meth:`from_sizes`)."""
    """True while the runs of ``_sorted_labels`` are counted but not located (see :meth:`locate_runs`)."""

    def __init__(self, labels: ArrayLike) -> None:
        labels = labels if isinstance(labels, np.ndarray) else _label_array(labels)
        if labels.ndim != 1:
            raise GroupError(f"Group ids must be a 1-D array, got shape {labels.shape}.")
        self.size = len(labels)
        self.codes = None
        if self.size == 0:
            self._contiguous(np.zeros(0, dtype=np.intp), labels)
        elif labels.dtype.kind in "iub" and (runs := _sorted_runs(labels)) is not None:
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
            fast = acceleration.kernel(acceleration.RUN_STARTS)
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

    @classmethod
    def from_sizes(
        cls, sizes: ArrayLike, labels: Sequence[Any] | Callable[[], Sequence[Any]] | None = None
    ) -> GroupLayout:
        """Contiguous groups of the given sizes, labelled ``labels`` (default: ``0..n-1``); sizes must be >= 1.

        ``labels`` may be a function that gives them, called only if a label is needed (an error message).
        """
        sizes = np.asarray(sizes, dtype=np.intp).reshape(-1)
        if len(sizes) and sizes.min() < 1:
            raise GroupError("Every group needs at least one trajectory; got a group of size 0.")
        layout = cls.__new__(cls)
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


SortedRuns = tuple[IndexArray | None, NDArray[Any] | None, int | None, int]
"""Run starts, run labels, common run length (or None) and run count; starts and labels are None when unlocated."""


def _sorted_runs(labels: NDArray[Any]) -> SortedRuns | None:
    """The runs of non-decreasing labels; None if labels ever decrease.

    With a registered ``sorted_runs`` kernel (:mod:`rllm.estimators.acceleration`), one compiled
    pass checks the order and counts the runs, and ragged runs are left unlocated: the
    ``group_centre`` kernel that reduces them finds them.
    """
    contiguous_ints = labels.dtype == np.int64 and labels.flags.c_contiguous
    fast = acceleration.kernel(acceleration.SORTED_RUNS) if contiguous_ints else None
    count = None
    if fast is not None:
        count = fast(labels)
        if count is None:
            return None
    elif not np.all(labels[1:] >= labels[:-1]):
        return None
    k = _uniform_run(labels) if count is None or len(labels) % count == 0 else None
    if k is not None:
        return np.arange(0, len(labels), k, dtype=np.intp), labels[::k], k, len(labels) // k
    if count is not None:
        return None, None, None, count
    starts = _run_starts(labels)
    return starts, labels[starts], None, len(starts)


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


def _dense_groups(labels: NDArray[Any]) -> tuple[IndexArray, NDArray[Any], IndexArray]:
    """Group number of every label, the group labels and sizes; no sort for integers in a small range."""
    if labels.dtype.kind in "iu":
        low, high = int(labels.min()), int(labels.max())
        if high - low < 4 * len(labels):
            offsets = labels.astype(np.intp, copy=False) if low == 0 else (labels - low).astype(np.intp, copy=False)
            counts = np.bincount(offsets)
            present = counts > 0
            if present.all():  # labels are already dense group numbers (they may be the caller's array)
                return offsets, np.arange(low, high + 1, dtype=labels.dtype), counts.astype(np.intp, copy=False)
            dense = np.cumsum(present, dtype=np.intp)
            dense -= 1
            group_labels = (np.flatnonzero(present) + low).astype(labels.dtype, copy=False)
            return dense[offsets], group_labels, counts[present].astype(np.intp, copy=False)
    if labels.dtype.kind != "O":
        group_labels, inverse, counts = np.unique(labels, return_inverse=True, return_counts=True)
        return inverse.reshape(-1).astype(np.intp, copy=False), group_labels, counts.astype(np.intp, copy=False)
    # Python objects (mixed types, tuples, frozensets): equal by Python's == within one kind of label
    # (1, 1.0 and True stay apart), numbered by first appearance.
    numbers: dict[Any, int] = {}
    firsts: list[Any] = []

    def number(v: Any) -> int:
        code = numbers.setdefault((_label_kind(type(v)), v), len(numbers))
        if code == len(firsts):
            firsts.append(v)
        return code

    try:
        codes = np.fromiter(map(number, labels), dtype=np.intp, count=len(labels))
    except TypeError:
        bad = next(v for v in labels if not isinstance(v, Hashable))
        raise GroupError(
            f"Group label {bad!r} is not hashable; use strings, numbers, tuples or frozensets as group ids."
        ) from None
    group_labels = np.empty(len(firsts), dtype=object)
    group_labels[:] = firsts
    return codes, group_labels, np.bincount(codes).astype(np.intp, copy=False)


def _label_kind(kind: type) -> type:
    """The kind of label a type gives: numpy's scalars count as Python's; bool, int and float are three kinds."""
    for python, family in ((bool, np.bool_), (int, np.integer), (float, np.floating)):
        if issubclass(kind, (python, family)):  # bool first: it is an int to Python
            return python
    return kind


def _label_array(values: ArrayLike) -> NDArray[Any]:
    """Group labels as an array without merging labels that Python tells apart.

    numpy would turn ``[1, "1"]`` into two equal strings and ``[("a", 1)]`` into a 2-D array;
    such inputs become an object array, whose labels compare as Python objects.
    """
    items = list(values)  # type: ignore[arg-type]
    try:
        array = np.asarray(items) if items else np.zeros(0, dtype=np.intp)
    except ValueError:  # ragged nesting, e.g. tuples of different lengths
        array = np.zeros((0, 0))
    if array.dtype.kind in "iufb" and array.ndim == 1 and len({_label_kind(v) for v in set(map(type, items))}) == 1:
        return array
    if array.ndim == 1 and array.dtype.kind in "US":
        kind = type(items[0])
        if all(type(v) is kind for v in items):
            return array
    out = np.empty(len(items), dtype=object)
    for i, value in enumerate(items):
        out[i] = value
    return out


FieldSource = Callable[[], Any]
"""Produces a batch field on first use (the collection step reads trajectories only when asked)."""


EXACT_INTEGERS = 2**53
"""Integers beyond this size change value when they become floats."""


def float_rewards(rewards: Any, dtype: Any = np.float64) -> FloatArray:
    """``rewards`` as a float array; what would fail or change value on the way is a :class:`RewardError`.

    A generator (read once, of unknown length) is refused, as are integers too large for a
    float and integers beyond 2**53, which floats cannot hold exactly.
    """
    if isinstance(rewards, Iterator):
        raise RewardError(f"Rewards must be a list or an array, got a {type(rewards).__name__}; pass list(...) of it.")
    try:
        given = np.asarray(rewards)
    except OverflowError:
        given = np.asarray(rewards, dtype=object)
    _refuse_non_numbers(_culprits(given, rewards))
    if given.dtype.kind in "iuO" and given.size:
        numbers = given.reshape(-1)
        if given.dtype.kind == "O":
            numbers = np.array([v for v in numbers if isinstance(v, int) and not isinstance(v, bool)], dtype=object)
        big = np.flatnonzero(np.abs(numbers) > EXACT_INTEGERS) if numbers.size else np.zeros(0, dtype=int)
        if big.size:
            value = int(numbers[big[0]])
            shown = value if value.bit_length() < 200 else f"an integer of {len(str(abs(value)))} digits"
            raise RewardError(
                f"{big.size} integer reward(s) are beyond 2**53, where floats cannot hold them exactly (the "
                f"first: {shown}); scale the rewards down or pass them as floats."
            )
    try:
        return np.asarray(given, dtype=dtype)
    except (TypeError, ValueError) as exc:
        raise RewardError(f"Rewards must be numbers: {exc}.") from None


_KIND_NAMES = {"U": "a string", "S": "bytes", "c": "a complex number", "V": "a record", "M": "a date", "m": "a time"}


def _non_number(given: NDArray[Any]) -> tuple[int, str] | None:
    """The flat position of the first value that is neither a real number nor None, and how to show it."""
    if given.dtype.kind in _KIND_NAMES and given.size:
        first, value = 0, given.reshape(-1)[0]
    elif given.dtype.kind == "O":
        flat = given.reshape(-1)
        bad = [i for i, v in enumerate(flat.tolist()) if v is not None and not isinstance(v, Real)]
        if not bad:
            return None
        first, value = bad[0], flat[bad[0]]
    else:
        return None
    kind = _KIND_NAMES.get(np.asarray(value).dtype.kind, f"of type {type(value).__name__}")
    shown = value.item() if isinstance(value, np.generic) else value
    return first, f"{shown!r}, {kind}"


def _culprits(given: NDArray[Any], values: Any) -> NDArray[Any]:
    """``given``, or when numpy made a list of numbers and strings (or complex values) all strings, the list as objects.

    Then the value that is no real number is found at its own position.
    """
    if given.dtype.kind in _KIND_NAMES and not isinstance(values, np.ndarray):
        return np.asarray(values, dtype=object)
    return given


_NOT_CONVERTED = "strings, bytes, complex numbers and other objects are refused, not converted"


def _refuse_non_numbers(given: NDArray[Any]) -> None:
    """The one reward rule of every door: a real number, or None (unscorable); never converted from another type."""
    found = _non_number(given)
    if found is not None:
        raise RewardError(
            f"The reward at position {found[0]} is {found[1]}; a reward is a real number (or None when it "
            f"cannot be scored): {_NOT_CONVERTED}."
        )


def _given(name: str, values: Any) -> NDArray[Any]:
    """A field's values as numpy holds them, before any conversion (ragged nesting is an error naming it)."""
    try:
        given = np.asarray(values)
        return _culprits(given, values)
    except (ValueError, OverflowError):
        try:
            return np.asarray(values, dtype=object)
        except ValueError:
            raise InputFieldError(
                f"The batch field {name!r} is nested unevenly; give one number per trajectory "
                "(one row of numbers per trajectory for per-step fields)."
            ) from None


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
        describe: Callable[[int], str] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        self.rewards: FloatArray = float_rewards(rewards, dtype)
        if self.rewards.ndim != 1:
            raise GroupError(f"Rewards must be a 1-D array, got shape {self.rewards.shape}.")
        self.layout = group_ids if isinstance(group_ids, GroupLayout) else GroupLayout(group_ids)
        n = len(self.rewards)
        if self.layout.size != n:
            raise GroupError(f"Got {n} rewards but {self.layout.size} group ids; give exactly one group id per reward.")
        self.dtype = np.dtype(dtype)
        self.nonfinite_rewards = "error"
        """The caller's policy for NaN/inf values (estimators with extra reward inputs follow it too)."""
        self.large_values = False
        """True when squaring the rewards overflows; compiled kernels then leave the work to numpy's scaled path."""
        self.describe = describe
        """Names the trajectory at a position in error messages (the collection step knows its uid)."""
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
        declared = declared_fields() if extra or set(sources or ()) - set(given) else {}
        unknown = sorted((set(sources or ()) | set(extra or ())) - set(given) - set(declared))
        if unknown:
            known = ", ".join([*OPTIONAL_FIELDS, *declared])
            raise GroupError(f"Unknown batch field(s) {', '.join(unknown)}; known: {known}.")
        self._per_step = {
            name: declared[name].per_step for name in (*(extra or ()), *(sources or ())) if name in declared
        }
        given.update(extra or {})
        self._sources = {k: v for k, v in (sources or {}).items() if given.get(k) is None}
        for name, value in given.items():
            if name not in self._sources:
                setattr(self, name, self._checked(name, value))

    def _checked(self, name: str, value: Any) -> Any:
        """Field ``name`` as the batch holds it, validated like rewards: real numbers, finite where scored."""
        if value is None:
            return None
        n = len(self.rewards)
        if name in ("roles", "task_ids"):  # labels: 1 and "1" stay apart, as group ids do
            return _per_item(_label_array(value) if not isinstance(value, np.ndarray) else value, n, name, None)
        if name == "component_weights":
            weights = self._numbers(name, _given(name, value), lambda i: f"at index {i}").reshape(-1)
            bad = ~np.isfinite(weights)
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise InputFieldError(
                    f"component_weights[{i}] is {weights[i]}; give one finite weight per reward component."
                )
            return weights
        if name == "reward_components":  # NaN follows the reward policy (gdpo): only the types are checked here
            given = _given(name, value)
            width = max(1, given.shape[1]) if given.ndim == 2 else 1
            return _components(self._numbers(name, given, lambda i: self._where(i // width)), n, self.dtype)
        builtin = BUILTIN_FIELDS.get(name)
        if (builtin is not None and builtin.per_step) or self._per_step.get(name, False):
            rows = value if isinstance(value, Ragged) else Ragged.from_rows([_given(name, r) for r in value], None)
            if len(rows) != n:
                raise GroupError(f"{name} must have one row per reward ({n}), got {len(rows)} rows.")

            def row(i: int) -> int:
                return int(np.searchsorted(rows.offsets, i, side="right")) - 1

            def step(i: int) -> str:
                return f"{self._where(row(i))}, step {i - int(rows.offsets[row(i)])}"

            ragged = rows.with_values(self._numbers(name, rows.values, step))
            bad = ~np.isfinite(ragged.values) & ragged.expand(np.isfinite(self.rewards))
            self._refuse(name, ragged.values, bad, "finite numbers, one per step", row)
            return ragged
        array = _per_item(self._numbers(name, _given(name, value), self._where), n, name, None)
        if name == "response_lengths":
            bad = ~(np.isfinite(array) & (array >= 0))
            self._refuse(name, array, bad, "a number of tokens (finite, >= 0)")
        else:
            self._refuse(name, array, ~np.isfinite(array) & np.isfinite(self.rewards), "a finite number")
        return array

    def _numbers(self, name: str, given: NDArray[Any], where: Callable[[int], str]) -> NDArray[Any]:
        """``given`` in the batch's float type; a value that is no real number is refused, naming where it is."""
        found = _non_number(given)
        if found is not None:
            raise InputFieldError(
                f"The batch field {name!r} {where(found[0])} is {found[1]}; its values are real numbers: "
                f"{_NOT_CONVERTED}."
            )
        return np.asarray(given, dtype=self.dtype)

    def _where(self, position: int) -> str:
        """A trajectory's place in error messages: the collection step's description, or group and position."""
        if self.describe is not None:
            return self.describe(position)
        group = self.layout.label(int(self.layout.group_index[position]))
        return f"at position {position} in group {group!r}"

    def _refuse(
        self,
        name: str,
        values: NDArray[Any],
        bad: NDArray[np.bool_],
        wanted: str,
        trajectory: Callable[[int], int] = int,
    ) -> None:
        """The error naming field ``name``'s first value where ``bad`` holds (its trajectory's group and position)."""
        if not bad.any():
            return
        first = int(np.flatnonzero(bad)[0])
        raise InputFieldError(
            f"{int(np.count_nonzero(bad))} value(s) of the batch field {name!r} are unusable; the first is "
            f"{self._where(trajectory(first))} (value {values[first].item()!r}). Give each trajectory {wanted}."
        )

    def _field_names(self) -> list[str]:
        return [*OPTIONAL_FIELDS, *self._per_step]

    def __getattr__(self, name: str) -> Any:
        # Only reached for fields left to a source: build them once, on first use.
        sources = self.__dict__.get("_sources", {})
        if name not in sources:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        value = self._checked(name, sources.pop(name)())
        if self.__dict__.get("_frozen"):
            value = _read_only(value)
        setattr(self, name, value)
        return value

    def freeze(self) -> None:
        """Make the rewards and every field read-only views: an estimator cannot change the caller's arrays."""
        self._frozen = True
        for name in ("rewards", *self._field_names()):
            if name in self.__dict__:
                setattr(self, name, _read_only(self.__dict__[name]))

    def __len__(self) -> int:
        return len(self.rewards)

    @property
    def n_groups(self) -> int:
        return self.layout.n_groups

    def subset(self, keep: NDArray[np.bool_]) -> AdvantageBatch:
        """The trajectories where ``keep`` is True, with their groups and fields (read on first use).

        Groups keep their labels; a group with no kept trajectory is absent.
        """
        labels = np.asarray(self.layout.labels, dtype=object)[self.layout.group_index[keep]]
        given = {"component_weights": self.__dict__.get("component_weights")}
        sources = {
            name: partial(_take, self, name, keep)
            for name in self._field_names()
            if name != "component_weights" and (name in self.__dict__ or name in self._sources)
        }
        sub = AdvantageBatch(
            self.rewards[keep], _label_array(labels.tolist()), dtype=self.dtype, sources=sources, **given
        )
        sub.large_values = self.large_values
        return sub

    def require(self, name: str, estimator: str) -> Any:
        value = getattr(self, name, None)
        if value is None and name not in OPTIONAL_FIELDS and name not in declared_fields():
            known = [*OPTIONAL_FIELDS, *declared_fields()]
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise MissingInputError(
                f"Estimator {estimator!r} requires the batch field {name!r}, which is neither built in nor "
                f"declared by an installed plugin.{hint} Fields: {', '.join(known)}."
            )
        if value is None:
            raise MissingInputError(
                f"Estimator {estimator!r} needs the input {name!r}, which this batch does not have. "
                f"Pass {name}=... to rllm.compute_advantages, or fill it from the trajectories "
                "(see docs/estimators.md)."
            )
        return value


def declared_fields() -> dict[str, BatchField]:
    """Batch fields the installed plugins declare (``rllm_register_batch_fields``), by name."""
    from rllm.plugins.manager import get_plugin_manager

    registry = get_plugin_manager().batch_fields
    return {name: registry.resolve(name).target for name in registry.names()}


def _take(batch: AdvantageBatch, name: str, keep: NDArray[np.bool_]) -> Any:
    """Field ``name`` of ``batch`` for the kept trajectories only."""
    value = getattr(batch, name)
    if value is None:
        return None
    if isinstance(value, Ragged):
        lengths = value.lengths[keep]
        offsets = np.zeros(len(lengths) + 1, dtype=np.intp)
        np.cumsum(lengths, out=offsets[1:])
        return Ragged(values=value.values[np.repeat(keep, value.lengths)], offsets=offsets)
    return np.asarray(value)[keep]


def _read_only(value: Any) -> Any:
    if isinstance(value, Ragged):
        return Ragged(values=_read_only(value.values), offsets=_read_only(value.offsets))
    if isinstance(value, np.ndarray) and value.flags.writeable:
        view = value.view()
        view.flags.writeable = False
        return view
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
