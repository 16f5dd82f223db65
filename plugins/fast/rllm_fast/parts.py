"""Run the parts of one kernel call in several threads (the compiled loops release the GIL).

Large batches are cut at group boundaries into parts of at least :data:`MIN_PART` values, at
most one per thread. ``RLLM_KERNEL_THREADS`` caps the threads (``1`` keeps all work on the
calling thread); :func:`threads` sets the cap for a block of code without touching the
environment. A :class:`Workers` pool starts on first use, and again in a forked child, whose
copy of the pool has no threads.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, TypeVar

from rllm.errors import ConfigError

if TYPE_CHECKING:  # imported on first use: most processes never start the pool
    from concurrent.futures import ThreadPoolExecutor

THREADS_VAR = "RLLM_KERNEL_THREADS"
"""Most threads one kernel call may use; default: the CPUs this process may run on, at most 8."""

MIN_PART = 1 << 17
"""Fewest values worth a thread of their own: below this, handing work over costs more than it saves."""

T = TypeVar("T")

_override: ContextVar[tuple[int, int] | None] = ContextVar("rllm_fast_threads", default=None)
"""(threads, fewest values per part) set by :func:`threads` for the current context."""


def thread_count() -> int:
    """Most threads one kernel call may use: :func:`threads`, else ``RLLM_KERNEL_THREADS``, else the CPUs (up to 8)."""
    override = _override.get()
    if override is not None:
        return override[0]
    value = os.environ.get(THREADS_VAR, "").strip()
    if value:
        try:
            return max(1, int(value))
        except ValueError:
            raise ConfigError(f"{THREADS_VAR}={value!r} is not a whole number; set 1 or more, or unset it.") from None
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(cpus, 8))


def part_count(size: int) -> int:
    """Into how many parts a batch of ``size`` values is cut."""
    override = _override.get()
    min_part = MIN_PART if override is None else override[1]
    return max(1, min(thread_count(), size // min_part))


@contextmanager
def threads(count: int, min_part: int = MIN_PART) -> Iterator[None]:
    """Use at most ``count`` threads per kernel call inside the block (this thread or task only).

    ``min_part`` lowers the fewest values per part, so that tests can split tiny batches.
    """
    if count < 1 or min_part < 1:
        raise ConfigError(f"threads({count}, min_part={min_part}): both must be at least 1.")
    token = _override.set((count, min_part))
    try:
        yield
    finally:
        _override.reset(token)


class Workers:
    """A thread pool for the parts of kernel calls, made on first use and grown as needed."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pool: tuple[int, int, ThreadPoolExecutor] | None = None
        """(process id, workers, pool) of the pool made last."""

    def run_all(self, tasks: Sequence[Callable[[], T]]) -> list[T]:
        """The results of ``tasks`` in order: the first runs on the calling thread, the others in the pool."""
        if len(tasks) <= 1:
            return [task() for task in tasks]
        futures = [self.executor(len(tasks) - 1).submit(task) for task in tasks[1:]]
        first = tasks[0]()
        return [first, *(future.result() for future in futures)]

    def executor(self, workers: int) -> ThreadPoolExecutor:
        """A pool of at least ``workers`` threads that belongs to this process."""
        from concurrent.futures import ThreadPoolExecutor

        with self._lock:
            pool = self._pool
            if pool is None or pool[0] != os.getpid() or pool[1] < workers:
                # A smaller pool is dropped, not shut down: another thread may be about to submit to it;
                # its idle workers exit once it is garbage-collected.
                pool = (os.getpid(), workers, ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rllm-kernel"))
                self._pool = pool
            return pool[2]
