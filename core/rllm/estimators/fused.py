"""Optional numba kernels (the ``fast`` extra) that fuse the per-group passes of contiguous layouts.

The numpy path reduces ragged runs with ``reduceat``/``repeat`` over every group and scans
labels several times; compiled loops do a group's work while it is in cache and find runs in
one pass. numba is imported on first use, never by ``import rllm``; when it is missing, fails
to import or ``RLLM_FUSED_KERNELS=0`` is set, :func:`kernels` returns None and callers keep
the numpy path. The kernels compute in the input's dtype with the numpy path's formulas, so
results agree with it up to summation order. Compiled code is cached by numba next to this
file or, when that is not writable, in the user's cache directory (``NUMBA_CACHE_DIR``
overrides); without any writable cache the kernels are compiled per process, silently.
"""

from __future__ import annotations

import os
import warnings
from contextlib import AbstractContextManager
from dataclasses import dataclass
from functools import partial
from itertools import pairwise
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from rllm.estimators import parallel
from rllm.estimators.switches import override

if TYPE_CHECKING:  # batch.py imports this module
    from rllm.estimators.batch import GroupLayout
    from rllm.estimators.numerics import Numerics

ENV_VAR = "RLLM_FUSED_KERNELS"
"""Set to ``0`` to use the numpy path even when numba is installed."""

CENTRE, DIVIDE_BY_STD, RLOO_FACTOR = 0, 1, 2
"""What :meth:`Kernels.centre` does after subtracting the group mean."""


def _group_scale(
    xs: Any, squares: Any, mean: Any, n: int, mode: int, ddof: int, eps: float, zero_constant: bool
) -> Any:
    """What a group's centred values are multiplied by: ``1 / (std + eps)`` or ``n / (n - 1)`` (RLOO), by ``mode``.

    Mirrors ``common.group_std``, ``inverse_scale`` and ``rloo``, in ``xs.dtype``.
    """
    t = xs.dtype.type
    if mode == RLOO_FACTOR:
        return t(n / (n - 1)) if n > 1 else t(1)
    std = np.sqrt(squares / t(max(n - ddof, 1))) if n > 1 else t(1)
    if zero_constant and std <= np.finfo(xs.dtype).eps * abs(mean) * n:
        return t(0)
    return t(1) / (std + t(eps))


def _centre_equal(
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
    """:func:`_centre_ragged` for groups of one ``size``, in phases over all groups.

    With one size every loop is predictable, so the CPU overlaps groups; the per-group scales
    (a square root and a division each) are one branch-free loop that the compiler vectorizes.
    """
    t = xs.dtype.type
    for g in range(len(means)):
        total = t(0)
        for i in range(g * size, (g + 1) * size):
            total += xs[i]
        means[g] = t(0) if size == 1 and lone_raw else total / t(size)
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


def _centre_group(
    xs: Any, a: int, n: int, total: Any, mode: int, ddof: int, eps: float, lone_raw: bool, zero_constant: bool, out: Any
) -> None:
    """Centre and scale the contiguous group ``xs[a:a + n]`` whose sum is ``total`` (mirrors ``common.centre``)."""
    t = xs.dtype.type
    mean = t(0) if n == 1 and lone_raw else total / t(n)
    squares = t(0)
    for i in range(a, a + n):
        out[i] = xs[i] - mean
        squares += out[i] * out[i]
    if mode != CENTRE:
        scale = _group_scale(xs, squares, mean, n, mode, ddof, eps, zero_constant)
        for i in range(a, a + n):
            out[i] *= scale


def _centre_ragged(
    xs: Any, starts: Any, sizes: Any, mode: int, ddof: int, eps: float, lone_raw: bool, zero_constant: bool, out: Any
) -> None:
    """``out = xs - group mean``, then by ``mode`` scaled (see :func:`_group_scale`), one contiguous group at a time.

    Each group's loops end at an unpredictable size; doing all of a group's work while it is in
    cache beats separate passes over the batch.
    """
    t = xs.dtype.type
    for g in range(len(starts)):
        a, n = starts[g], sizes[g]
        total = t(0)
        for i in range(a, a + n):
            total += xs[i]
        _centre_group(xs, a, n, total, mode, ddof, eps, lone_raw, zero_constant, out)


def _centre_runs(
    xs: Any, labels: Any, mode: int, ddof: int, eps: float, lone_raw: bool, zero_constant: bool, out: Any, starts: Any
) -> int:
    """:func:`_centre_ragged` for sorted ``labels``, finding each run of equal labels while summing it.

    This saves the separate pass that would locate the runs first; their starts are written to
    ``starts`` (one slot per run) so that the layout need not look for them again. Returns the run count.
    """
    t = xs.dtype.type
    count = len(xs)
    g = 0
    i = 0
    while i < count:
        a = i
        first = labels[a]
        total = t(0)
        while i < count and labels[i] == first:
            total += xs[i]
            i += 1
        starts[g] = a
        g += 1
        _centre_group(xs, a, i - a, total, mode, ddof, eps, lone_raw, zero_constant, out)
    return g


def _count_sorted_runs(labels: Any) -> int:
    """The number of runs of equal labels, or -1 if labels ever decrease (then they are not sorted).

    Branch-free, so random run lengths cost no mispredictions and the loop vectorizes.
    """
    count = 1
    decreases = 0
    for i in range(1, len(labels)):
        count += labels[i] != labels[i - 1]
        decreases += labels[i] < labels[i - 1]
    return -1 if decreases else count


def _fill_run_starts(labels: Any, starts: Any) -> None:
    """Where each run of equal labels begins, into ``starts`` sized one more than the run count.

    Every position is written to the current slot, which advances at a run start (branch-free).
    """
    starts[0] = 0
    count = 1
    for i in range(1, len(labels)):
        starts[count] = i
        count += labels[i] != labels[i - 1]


def _next_run_start(labels: Any, position: int) -> int:
    """The first run start of sorted ``labels`` at or after ``position`` (``len(labels)`` if none): a place to cut."""
    while 0 < position < len(labels) and labels[position] == labels[position - 1]:
        position += 1
    return position


@dataclass(frozen=True)
class Kernels:
    """The compiled kernels; obtain them with :func:`kernels`."""

    centre_equal: Any
    centre_ragged: Any
    centre_runs: Any
    count_sorted_runs: Any
    fill_run_starts: Any
    next_run_start: Any

    def centre(self, xs: NDArray[Any], layout: GroupLayout, mode: int, numerics: Numerics) -> NDArray[Any]:
        """A fresh array of ``xs`` centred per group of a contiguous ``layout`` and scaled by ``mode``.

        Large batches are cut at group boundaries into parts that run in parallel (:mod:`.parallel`).
        """
        xs = np.ascontiguousarray(xs)
        out = np.empty_like(xs)
        options = (mode, numerics.ddof, float(numerics.eps), numerics.single == "raw", numerics.zero_variance == "zero")
        parts = parallel.part_count(len(xs))
        if layout.uniform_size is not None:
            self._centre_equal_parts(xs, layout.uniform_size, options, out, parts)
        elif (labels := layout.unlocated_runs) is not None:
            layout.locate_runs(self._centre_runs_parts(xs, labels, layout.n_groups, options, out, parts))
        else:
            starts, sizes = layout.starts, layout.sizes
            cuts = [*np.searchsorted(starts, [len(xs) * j // parts for j in range(parts)]).tolist(), len(starts)]
            tasks = [partial(self.centre_ragged, xs, starts[a:b], sizes[a:b], *options, out) for a, b in pairwise(cuts)]
            parallel.run_all(tasks)
        return out

    def _centre_equal_parts(
        self, xs: NDArray[Any], k: int, options: tuple[Any, ...], out: NDArray[Any], parts: int
    ) -> None:
        n_groups = len(xs) // k
        means, scales = np.empty(n_groups, dtype=xs.dtype), np.empty(n_groups, dtype=xs.dtype)
        cuts = [n_groups * j // parts * k for j in range(parts + 1)]  # value positions at group boundaries
        tasks = [
            partial(self.centre_equal, xs[a:b], k, *options, means[a // k : b // k], scales[a // k : b // k], out[a:b])
            for a, b in pairwise(cuts)
        ]
        parallel.run_all(tasks)

    def _centre_runs_parts(
        self,
        xs: NDArray[Any],
        labels: NDArray[np.int64],
        n_groups: int,
        options: tuple[Any, ...],
        out: NDArray[Any],
        parts: int,
    ) -> NDArray[np.intp]:
        """Centre groups given by sorted ``labels``, cut at run starts; returns where the runs start."""
        size = len(xs)
        cuts = sorted({0, size, *(self.next_run_start(labels, size * j // parts) for j in range(1, parts))})
        found = [np.empty(min(n_groups, b - a), dtype=np.intp) for a, b in pairwise(cuts)]
        tasks = [
            partial(self.centre_runs, xs[a:b], labels[a:b], *options, out[a:b], starts)
            for (a, b), starts in zip(pairwise(cuts), found, strict=True)
        ]
        counts = parallel.run_all(tasks)
        return np.concatenate([starts[:count] + a for starts, count, a in zip(found, counts, cuts, strict=False)])

    def sorted_runs(self, labels: NDArray[np.int64]) -> int | None:
        """How many runs of equal labels ``labels`` (int64, C-contiguous) has; None if they are not sorted."""
        count = self.count_sorted_runs(labels)
        return None if count < 0 else int(count)

    def run_starts(self, labels: NDArray[np.int64], count: int) -> NDArray[np.intp]:
        """Where each of the ``count`` runs of sorted ``labels`` begins (see :meth:`sorted_runs`)."""
        starts = np.empty(count + 1, dtype=np.intp)
        self.fill_run_starts(labels, starts)
        return starts[:count]


_UNSET: Any = object()
_loaded: Kernels | None = _UNSET


def kernels() -> Kernels | None:
    """The fused kernels, or None when disabled by ``RLLM_FUSED_KERNELS=0`` or numba is unavailable.

    numba is imported and the kernels compiled (or loaded from numba's cache) on the first call only.
    """
    global _loaded
    if os.environ.get(ENV_VAR, "1").strip().lower() in ("0", "false", "no", "off"):
        return None
    if _loaded is _UNSET:
        _loaded = _load()
    return _loaded


def path(name: str) -> AbstractContextManager[None]:
    """Run a block on the ``"fused"`` or the ``"numpy"`` path (via ``RLLM_FUSED_KERNELS``; benchmarks, tests)."""
    return override(ENV_VAR, "1" if name == "fused" else "0")


def _load() -> Kernels | None:
    """Compile with numba's on-disk cache, or without it when no cache directory is writable; None on failure."""
    try:
        import numba
    except Exception:  # missing or broken numba: the numpy path is complete
        return None
    for cache in (True, False):
        try:
            with warnings.catch_warnings():  # numba warns when it cannot write its cache; users need not see it
                warnings.simplefilter("ignore", numba.NumbaWarning)
                return _compiled(numba, cache)
        except Exception:
            continue
    return None


def _compiled(numba: Any, cache: bool) -> Kernels:
    """The kernels, compiled now for float64 and float32 values and int64 labels (not in the middle of a call)."""
    global _group_scale, _centre_group

    def jit(fn: Any) -> Any:
        return numba.njit(cache=cache, error_model="numpy", nogil=True)(getattr(fn, "py_func", fn))

    # The kernels call these helpers, so they must be numba functions when the kernels compile.
    _group_scale = jit(_group_scale)
    _centre_group = jit(_centre_group)
    kernels = (_centre_equal, _centre_ragged, _centre_runs, _count_sorted_runs, _fill_run_starts, _next_run_start)
    built = Kernels(*(jit(fn) for fn in kernels))
    starts, sizes = np.array([0, 1], dtype=np.intp), np.array([1, 2], dtype=np.intp)
    labels = np.array([0, 1, 1], dtype=np.int64)
    for dtype in (np.float64, np.float32):
        xs = np.array([1.0, 2.0, 4.0, 8.0], dtype=dtype)
        built.centre_equal(xs, 2, DIVIDE_BY_STD, 0, 1e-6, True, False, xs[:2].copy(), xs[:2].copy(), xs.copy())
        built.centre_ragged(xs[:3], starts, sizes, DIVIDE_BY_STD, 0, 1e-6, True, False, xs[:3].copy())
        built.centre_runs(xs[:3], labels, DIVIDE_BY_STD, 0, 1e-6, True, False, xs[:3].copy(), starts.copy())
    built.run_starts(labels, built.sorted_runs(labels) or 0)
    built.next_run_start(labels, 1)
    return built
