"""How arbitrary group labels become groups: sorted runs, dense group numbers, label kinds.

:class:`rllm.estimators.layout.GroupLayout` calls these once per batch; they avoid a sort
where the labels allow (sorted runs, integers in a small range) and keep apart labels that
Python tells apart (``1``, ``1.0``, ``True`` and ``"1"`` are four groups).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from rllm.errors import GroupError
from rllm.estimators import acceleration
from rllm.estimators.ragged import IndexArray

SortedRuns = tuple[IndexArray | None, NDArray[Any] | None, int | None, int]
"""Run starts, run labels, common run length (or None) and run count; starts and labels are None when unlocated."""


def _sorted_runs(labels: NDArray[Any], kernel: Callable[[str], Callable[..., Any] | None]) -> SortedRuns | None:
    """The runs of non-decreasing labels; None if labels ever decrease.

    With a ``sorted_runs`` kernel (:mod:`rllm.estimators.acceleration`; ``kernel(name)`` gives the
    layout's), one compiled pass checks the order and counts the runs, and ragged runs are left
    unlocated: the ``group_centre`` kernel that reduces them finds them.
    """
    contiguous_ints = labels.dtype == np.int64 and labels.flags.c_contiguous
    fast = kernel(acceleration.SORTED_RUNS) if contiguous_ints else None
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
    # (1, 1.0 and True stay apart, inside tuples too), numbered by first appearance.
    numbers: dict[Any, int] = {}
    firsts: list[Any] = []

    def number(v: Any) -> int:
        code = numbers.setdefault(_label_key(v), len(numbers))
        if code == len(firsts):
            firsts.append(v)
        return code

    try:
        codes = np.fromiter(map(number, labels), dtype=np.intp, count=len(labels))
    except TypeError:
        bad = next(v for v in labels if not _hashable(v))
        raise GroupError(
            f"Group label {bad!r} is not hashable; use strings, numbers, tuples or frozensets as group ids."
        ) from None
    group_labels = np.empty(len(firsts), dtype=object)
    group_labels[:] = firsts
    return codes, group_labels, np.bincount(codes).astype(np.intp, copy=False)


def _label_key(label: Any) -> Any:
    """What a label is grouped by: its kind and value, item by item inside tuples and frozensets."""
    if isinstance(label, tuple):
        return tuple, tuple(map(_label_key, label))
    if isinstance(label, frozenset):
        return frozenset, frozenset(map(_label_key, label))
    return _label_kind(type(label)), label


def _hashable(label: Any) -> bool:
    """Whether ``label`` can key a dict (a tuple holding a list is a Hashable that cannot)."""
    try:
        hash(label)
    except TypeError:
        return False
    return True


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
