"""Running code rllm does not own (agent flows, workflows' blocking calls, evaluators, trackers) so it cannot end
or hang the run.

Two things go wrong with such code that an ``except Exception`` does not catch. It may leave with
``sys.exit()`` (``SystemExit``) or another ``BaseException``: :func:`exit_error` turns that into a
:class:`~rllm.errors.UserCodeExit` the caller reports like any failure. And it may block forever:
:class:`UserThreads` runs it on daemon threads that nothing joins, so a call abandoned at its deadline
cannot keep a finished or failed run's process alive (``ThreadPoolExecutor`` joins its workers at
interpreter exit, and ``asyncio.run`` joins its default executor's).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from rllm.errors import UserCodeExit

__all__ = ["UserThreads", "call_user", "exit_error", "is_real_interrupt"]


def exit_error(exc: BaseException) -> UserCodeExit:
    """The error for user code that left with ``exc``, a ``BaseException`` that is not an ``Exception``."""
    if isinstance(exc, SystemExit):
        return UserCodeExit(f"called sys.exit({exc.code!r})")
    if isinstance(exc, KeyboardInterrupt):
        return UserCodeExit("raised KeyboardInterrupt outside the main thread, where no interrupt arrives")
    return UserCodeExit(f"raised {type(exc).__name__}, a BaseException that is not an Exception")


def call_user(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``, user code: a ``BaseException`` that is not an ``Exception`` and no real interrupt
    (:func:`is_real_interrupt`) leaves as :func:`exit_error`'s error, on whichever thread or executor it runs."""
    try:
        return fn(*args, **kwargs)
    except Exception:
        raise
    except BaseException as exc:  # sys.exit() and the like: the code's failure, never the thread's or the run's end
        if is_real_interrupt(exc):
            raise
        raise exit_error(exc) from None


def is_real_interrupt(exc: BaseException) -> bool:
    """Whether ``exc``, caught on the event loop's thread, must stop the run as it is: a cancellation of the running
    task (a deadline, the run stopping) or a KeyboardInterrupt in the main thread (Ctrl-C arrives there)."""
    if isinstance(exc, asyncio.CancelledError):  # off the loop (a worker thread) no task is there to be cancelled
        task = _current_task()
        cancelling = getattr(task, "cancelling", None)  # Python 3.11+; before it every cancellation counts as real
        return task is not None and (cancelling is None or cancelling() > 0)
    return isinstance(exc, KeyboardInterrupt) and threading.current_thread() is threading.main_thread()


def _current_task() -> asyncio.Task[Any] | None:
    try:
        return asyncio.current_task()
    except RuntimeError:
        return None


class UserThreads(ThreadPoolExecutor):
    """A thread pool for user code that may never return: daemon workers, never joined.

    It is a ``ThreadPoolExecutor`` (``loop.set_default_executor`` takes nothing else) whose ``shutdown``
    does not wait for a call still running, since waiting for a stuck flow is the hang it exists to
    avoid. A call that leaves with a ``BaseException`` that is not an ``Exception`` fails its future
    with :func:`exit_error`'s error: no signal reaches a worker thread, so none of them is an interrupt.
    """

    _names = itertools.count()

    def __init__(self, max_workers: int | None = None, thread_name_prefix: str = "rllm-user") -> None:
        workers = min(32, (os.cpu_count() or 1) + 4) if max_workers is None else int(max_workers)
        super().__init__(workers, thread_name_prefix)  # starts no thread; submit and shutdown are this class's
        self._size, self._prefix = workers, thread_name_prefix
        self._jobs: queue.SimpleQueue[tuple[Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]] | None]
        self._jobs = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)
        self._workers: list[threading.Thread] = []
        self._guard = threading.Lock()
        self._closed = False

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:  # type: ignore[override]
        """Run ``fn(*args, **kwargs)`` on a daemon worker; an exit fails its future with :func:`exit_error`'s error."""
        future: Future[Any] = Future()
        with self._guard:
            if self._closed:
                raise RuntimeError("cannot schedule new futures after shutdown")
            self._jobs.put((future, fn, args, kwargs))
            if not self._idle.acquire(blocking=False) and len(self._workers) < self._size:
                worker = threading.Thread(target=self._work, name=f"{self._prefix}_{next(self._names)}", daemon=True)
                worker.start()
                self._workers.append(worker)
        return future

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            future, fn, args, kwargs = job
            del job
            if future.set_running_or_notify_cancel():
                try:
                    result = call_user(fn, *args, **kwargs)
                except Exception as exc:
                    future.set_exception(exc)
                else:
                    future.set_result(result)
            del future, fn, args, kwargs
            self._idle.release()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Take no more calls and let idle workers end; a call still running is left to finish (or to end with the
        process), whatever ``wait`` says."""
        with self._guard:
            if self._closed:
                return
            self._closed = True
            workers = len(self._workers)
        if cancel_futures:
            while True:
                try:
                    job = self._jobs.get_nowait()
                except queue.Empty:
                    break
                if job is not None:
                    job[0].cancel()
        for _ in range(workers):
            self._jobs.put(None)
