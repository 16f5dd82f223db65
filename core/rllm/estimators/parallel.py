"""Run the parts of one kernel call in several threads (the fused kernels release the GIL).

Large batches are cut at group boundaries into parts of at least :data:`MIN_PART` values, at
most one per thread; ``RLLM_KERNEL_THREADS`` caps the threads (``1`` keeps all work on the
calling thread). The pool starts on first use, and again in a forked child, whose copy of the
pool has no threads.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, TypeVar

from rllm.errors import ConfigError
from rllm.estimators.switches import override

if TYPE_CHECKING:  # imported on first use: most processes never start the pool
    from concurrent.futures import ThreadPoolExecutor

THREADS_VAR = "RLLM_KERNEL_THREADS"
"""Most threads one kernel call may use; default: the CPUs this process may run on, at most 8."""

MIN_PART = 1 << 17
"""Fewest values worth a thread of their own: below this, handing work over costs more than it saves."""

T = TypeVar("T")

_lock = threading.Lock()
_pool: tuple[int, int, ThreadPoolExecutor] | None = None
"""(process id, workers, pool) of the pool made last."""


def thread_count() -> int:
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
    return max(1, min(thread_count(), size // MIN_PART))


@contextmanager
def threads(count: int, min_part: int | None = None) -> Iterator[None]:
    """Use at most ``count`` threads per kernel call inside the block; ``min_part`` overrides :data:`MIN_PART`."""
    global MIN_PART
    before = MIN_PART
    MIN_PART = before if min_part is None else min_part
    try:
        with override(THREADS_VAR, str(count)):
            yield
    finally:
        MIN_PART = before


def run_all(tasks: Sequence[Callable[[], T]]) -> list[T]:
    """The results of ``tasks`` in order: the first runs on the calling thread, the others in the pool."""
    if len(tasks) <= 1:
        return [task() for task in tasks]
    futures = [_executor(len(tasks) - 1).submit(task) for task in tasks[1:]]
    first = tasks[0]()
    return [first, *(future.result() for future in futures)]


def _executor(workers: int) -> ThreadPoolExecutor:
    from concurrent.futures import ThreadPoolExecutor

    global _pool
    with _lock:
        if _pool is None or _pool[0] != os.getpid() or _pool[1] < workers:
            # A smaller pool is dropped, not shut down: another thread may be about to submit to it;
            # its idle workers exit once it is garbage-collected.
            _pool = (os.getpid(), workers, ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rllm-kernel"))
        return _pool[2]
