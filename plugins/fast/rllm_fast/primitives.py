"""The toolkit primitives ``group_centre``, ``sorted_runs`` and ``run_starts`` on compiled loops.

numba is imported and the loops compiled (or loaded from numba's cache) on the first call, not
when the plugin loads. If that fails (a numba that does not import with this numpy, say), one
:class:`rllm.errors.PluginWarning` says so and the toolkit's numpy path runs.
"""

from __future__ import annotations

import importlib
import threading
import warnings
from functools import partial
from itertools import pairwise
from types import ModuleType
from typing import Any

import numpy as np
from numpy.typing import NDArray

from rllm.errors import PluginWarning
from rllm.toolkit import GroupLayout, Numerics
from rllm_fast.parts import Workers, part_count

_UNLOADED: Any = object()


class FastPrimitives:
    """Compiled versions of the toolkit primitives; the loops load on first use, large calls run in parts."""

    def __init__(self) -> None:
        self._loops: ModuleType | None = _UNLOADED
        self._lock = threading.Lock()
        self.workers = Workers()

    def loops(self) -> ModuleType | None:
        """The compiled loops (:mod:`rllm_fast.loops`), or None when numba failed to import or compile."""
        if self._loops is _UNLOADED:
            with self._lock:
                if self._loops is _UNLOADED:
                    self._loops = _load()
        return self._loops

    def group_centre(self, xs: NDArray[Any], layout: GroupLayout, mode: int, numerics: Numerics) -> NDArray[Any] | None:
        """A fresh array of ``xs`` centred per group of a contiguous ``layout`` and scaled by ``mode``.

        Large batches are cut at group boundaries into parts that run in parallel (:mod:`rllm_fast.parts`).
        """
        loops = self.loops()
        if loops is None or xs.dtype not in (np.float64, np.float32):
            return None
        xs = np.ascontiguousarray(xs)
        out = np.empty_like(xs)
        options = (mode, numerics.ddof, float(numerics.eps), numerics.single == "raw", numerics.zero_variance == "zero")
        parts = part_count(len(xs))
        if layout.uniform_size is not None:
            self._centre_equal(loops, xs, layout.uniform_size, options, out, parts)
        elif (labels := layout.unlocated_runs) is not None:
            layout.locate_runs(self._centre_runs(loops, xs, labels, layout.n_groups, options, out, parts))
        else:
            starts = np.ascontiguousarray(layout.starts, dtype=np.intp)
            sizes = np.ascontiguousarray(layout.sizes, dtype=np.intp)
            cuts = [*np.searchsorted(starts, [len(xs) * j // parts for j in range(parts)]).tolist(), len(starts)]
            self.workers.run_all(
                [partial(loops.centre_ragged, xs, starts[a:b], sizes[a:b], *options, out) for a, b in pairwise(cuts)]
            )
        return out

    def _centre_equal(
        self, loops: ModuleType, xs: NDArray[Any], k: int, options: tuple[Any, ...], out: NDArray[Any], parts: int
    ) -> None:
        n_groups = len(xs) // k
        means, scales = np.empty(n_groups, dtype=xs.dtype), np.empty(n_groups, dtype=xs.dtype)
        cuts = [n_groups * j // parts * k for j in range(parts + 1)]  # value positions at group boundaries
        tasks = [
            partial(loops.centre_equal, xs[a:b], k, *options, means[a // k : b // k], scales[a // k : b // k], out[a:b])
            for a, b in pairwise(cuts)
        ]
        self.workers.run_all(tasks)

    def _centre_runs(
        self,
        loops: ModuleType,
        xs: NDArray[Any],
        labels: NDArray[np.int64],
        n_groups: int,
        options: tuple[Any, ...],
        out: NDArray[Any],
        parts: int,
    ) -> NDArray[np.intp]:
        """Centre groups given by sorted ``labels``, cut at run starts; returns where the runs start."""
        size = len(xs)
        cuts = sorted({0, size, *(loops.next_run_start(labels, size * j // parts) for j in range(1, parts))})
        found = [np.empty(min(n_groups, b - a), dtype=np.intp) for a, b in pairwise(cuts)]
        tasks = [
            partial(loops.centre_runs, xs[a:b], labels[a:b], *options, out[a:b], starts)
            for (a, b), starts in zip(pairwise(cuts), found, strict=True)
        ]
        counts = self.workers.run_all(tasks)
        return np.concatenate([starts[:count] + a for starts, count, a in zip(found, counts, cuts, strict=False)])

    def sorted_runs(self, labels: NDArray[np.int64]) -> int | None:
        """How many runs of equal labels ``labels`` (int64, C-contiguous) has; None if they are not sorted."""
        loops = self.loops()
        if loops is None:  # the numpy formulation of the same answer
            steps = np.diff(labels)
            return None if (steps < 0).any() else int(np.count_nonzero(steps)) + 1
        count = loops.count_sorted_runs(labels)
        return None if count < 0 else int(count)

    def run_starts(self, labels: NDArray[np.int64], count: int) -> NDArray[np.intp]:
        """Where each of the ``count`` runs of sorted ``labels`` begins (see :meth:`sorted_runs`)."""
        starts = np.empty(count + 1, dtype=np.intp)
        loops = self.loops()
        if loops is None:
            starts[0] = 0
            starts[1:count] = np.flatnonzero(np.diff(labels)) + 1
        else:
            loops.fill_run_starts(labels, starts)
        return starts[:count]


def _load() -> ModuleType | None:
    """Import numba and the compiled loops; None, with one warning, if either fails."""
    try:
        import numba

        with warnings.catch_warnings():  # numba warns when it cannot write its cache; users need not see it
            warnings.simplefilter("ignore", numba.NumbaWarning)
            return importlib.import_module("rllm_fast.loops")
    except Exception as exc:  # a missing or broken numba: the numpy path is complete
        warnings.warn(
            f"rllm plugin 'fast' could not compile its kernels ({type(exc).__name__}: {exc}); rllm uses its numpy "
            "path, which is slower. Reinstall numba with `pip install 'rllm[fast]'`, or set "
            "RLLM_DISABLED_PLUGINS=fast to silence this.",
            PluginWarning,
            stacklevel=3,
        )
        return None
