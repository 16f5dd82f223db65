"""The compiled loops behind the fast primitives; importing this module imports numba and compiles them.

The numpy path reduces ragged runs with ``reduceat``/``repeat`` over every group and scans
labels several times; these loops do a group's work while it is in cache and find runs in one
pass. They compute in the input's dtype with the numpy path's formulas, so results agree with
it up to summation order, except that group sums are accumulated in float64 as the numpy path
does: a float32 running sum of a uniform group of non-dyadic rewards (0.7, 1/3) drifts from
the mean by a rounding residue, which ``std + eps`` then turns into large advantages of one sign.

Every loop is compiled when this module is imported, for float64 and float32 values, int64
labels and intp positions, with its inputs typed read-only: numba passes writable arrays to a
read-only parameter as they are, so one compilation serves both kinds, and the compiler
refuses any loop that would write into its inputs. Compiled code is cached by numba next to
this file or, when that is not writable, in the user's cache directory (``NUMBA_CACHE_DIR``
overrides); without any writable cache the loops are compiled per process.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numba
import numpy as np
from numba import types

from rllm.toolkit import CENTRE, DIVIDE_BY_STD, RLOO_FACTOR

_OPTIONS = {"error_model": "numpy", "nogil": True}
"""numpy's rules for division by zero (inf/NaN, which the output check reports), and no GIL: parts run in threads."""


def _jit(signatures: list[Any] | None = None) -> Callable[[Callable[..., Any]], Any]:
    """Compile with numba's on-disk cache when a cache directory is writable, else for this process only."""

    def compile_one(fn: Callable[..., Any]) -> Any:
        try:
            return numba.njit(signatures, cache=True, **_OPTIONS)(fn)  # type: ignore[call-overload]
        except RuntimeError:  # numba found no writable cache directory
            return numba.njit(signatures, **_OPTIONS)(fn)  # type: ignore[call-overload]

    return compile_one


def _array(dtype: Any, readonly: bool = False) -> Any:
    return types.Array(dtype, 1, "C", readonly=readonly)


_FLOATS = (types.float64, types.float32)
_POSITIONS = _array(types.intp, readonly=True)
_LABELS = _array(types.int64, readonly=True)
_SETTINGS = (types.intp, types.intp, types.float64, types.boolean, types.boolean)
"""``mode, ddof, eps, lone_raw, zero_constant``: the group policies every centring loop takes."""


@_jit()
def _group_scale(
    xs: Any, squares: Any, mean: Any, n: int, mode: int, ddof: int, eps: float, zero_constant: bool
) -> Any:
    """What a group's centred values are multiplied by: ``1 / (std + eps)`` or ``n / (n - 1)`` (RLOO), by ``mode``.

    Mirrors the toolkit's ``group_std`` and ``inverse_scale`` and the RLOO estimator, in ``xs.dtype``.
    """
    t = xs.dtype.type
    if mode == RLOO_FACTOR:
        return t(n / (n - 1)) if n > 1 else t(1)
    std = np.sqrt(squares / t(max(n - ddof, 1))) if n > 1 else t(1)
    if zero_constant and std <= np.finfo(xs.dtype).eps * abs(mean) * n:
        return t(0)
    return t(1) / (std + t(eps))


@_jit([types.void(_array(f, True), types.intp, *_SETTINGS, _array(f), _array(f), _array(f)) for f in _FLOATS])
def centre_equal(
    xs: Any,
    size: int,
    mode: int,
    ddof: int,
    eps: float,
    lone_raw: bool,
    zero_constant: bool,
    means: Any,
    scales: Any,
    out: Any,
) -> None:
    """:func:`centre_ragged` for groups of one ``size``, in phases over all groups.

    With one size every loop is predictable, so the CPU overlaps groups; the per-group scales
    (a square root and a division each) are one branch-free loop that the compiler vectorizes.
    """
    t = xs.dtype.type
    for g in range(len(means)):
        total = 0.0  # float64 whatever the dtype: see the module docstring
        for i in range(g * size, (g + 1) * size):
            total += xs[i]
        means[g] = t(0) if size == 1 and lone_raw else t(total / size)
    factor = t(size / (size - 1)) if mode == RLOO_FACTOR and size > 1 else t(1)
    for g in range(len(means)):
        squares = t(0)
        for i in range(g * size, (g + 1) * size):
            deviation = xs[i] - means[g]
            out[i] = deviation * factor
            squares += deviation * deviation
        scales[g] = squares
    if mode != DIVIDE_BY_STD:
        return
    # _group_scale's std branch, written out: calling it here keeps the loop from vectorizing
    # (the kernel measured about 25% slower).
    denominator = t(max(size - ddof, 1))
    tiny = np.finfo(xs.dtype).eps
    for g in range(len(means)):
        std = np.sqrt(scales[g] / denominator) if size > 1 else t(1)
        constant = zero_constant and std <= tiny * abs(means[g]) * size
        scales[g] = t(0) if constant else t(1) / (std + t(eps))
    for g in range(len(means)):
        for i in range(g * size, (g + 1) * size):
            out[i] *= scales[g]


@_jit()
def _centre_group(
    xs: Any, a: int, n: int, total: Any, mode: int, ddof: int, eps: float, lone_raw: bool, zero_constant: bool, out: Any
) -> None:
    """Centre and scale the contiguous group ``xs[a:a + n]``, whose float64 sum is ``total`` (as ``centre`` does)."""
    t = xs.dtype.type
    mean = t(0) if n == 1 and lone_raw else t(total / n)
    squares = t(0)
    for i in range(a, a + n):
        out[i] = xs[i] - mean
        squares += out[i] * out[i]
    if mode != CENTRE:
        scale = _group_scale(xs, squares, mean, n, mode, ddof, eps, zero_constant)
        for i in range(a, a + n):
            out[i] *= scale


@_jit([types.void(_array(f, True), _POSITIONS, _POSITIONS, *_SETTINGS, _array(f)) for f in _FLOATS])
def centre_ragged(
    xs: Any, starts: Any, sizes: Any, mode: int, ddof: int, eps: float, lone_raw: bool, zero_constant: bool, out: Any
) -> None:
    """``out = xs - group mean``, then by ``mode`` scaled (see :func:`_group_scale`), one contiguous group at a time.

    Each group's loops end at an unpredictable size; doing all of a group's work while it is in
    cache beats separate passes over the batch.
    """
    for g in range(len(starts)):
        a, n = starts[g], sizes[g]
        total = 0.0
        for i in range(a, a + n):
            total += xs[i]
        _centre_group(xs, a, n, total, mode, ddof, eps, lone_raw, zero_constant, out)


@_jit([types.intp(_array(f, True), _LABELS, *_SETTINGS, _array(f), _array(types.intp)) for f in _FLOATS])
def centre_runs(
    xs: Any, labels: Any, mode: int, ddof: int, eps: float, lone_raw: bool, zero_constant: bool, out: Any, starts: Any
) -> int:
    """:func:`centre_ragged` for sorted ``labels``, finding each run of equal labels while summing it.

    This saves the separate pass that would locate the runs first; their starts are written to
    ``starts`` (one slot per run) so that the layout need not look for them again. Returns the run count.
    """
    count = len(xs)
    g = 0
    i = 0
    while i < count:
        a = i
        first = labels[a]
        total = 0.0
        while i < count and labels[i] == first:
            total += xs[i]
            i += 1
        starts[g] = a
        g += 1
        _centre_group(xs, a, i - a, total, mode, ddof, eps, lone_raw, zero_constant, out)
    return g


@_jit([types.intp(_LABELS)])
def count_sorted_runs(labels: Any) -> int:
    """The number of runs of equal labels, or -1 if labels ever decrease (then they are not sorted).

    Branch-free, so random run lengths cost no mispredictions and the loop vectorizes.
    """
    count = 1
    decreases = 0
    for i in range(1, len(labels)):
        count += labels[i] != labels[i - 1]
        decreases += labels[i] < labels[i - 1]
    return -1 if decreases else count


@_jit([types.void(_LABELS, _array(types.intp))])
def fill_run_starts(labels: Any, starts: Any) -> None:
    """Where each run of equal labels begins, into ``starts`` sized one more than the run count.

    Every position is written to the current slot, which advances at a run start (branch-free).
    """
    starts[0] = 0
    count = 1
    for i in range(1, len(labels)):
        starts[count] = i
        count += labels[i] != labels[i - 1]


@_jit([types.intp(_LABELS, types.intp)])
def next_run_start(labels: Any, position: int) -> int:
    """The first run start of sorted ``labels`` at or after ``position`` (``len(labels)`` if none): a place to cut."""
    while 0 < position < len(labels) and labels[position] == labels[position - 1]:
        position += 1
    return position
