"""``rllm.workflow.timeout`` for a batch of episodes behind one timer, as ``asyncio.timeout`` is for one.

``asyncio.timeout`` schedules and cancels a timer handle per block: for a batch of 128
one-token episodes that was 2 ms a batch, more than the model's forward. Every episode's
deadline is the same number of seconds after its attempt began, so the deadlines fall in the
order the attempts began: one timer waits for the oldest unfinished one.
"""

from __future__ import annotations

import asyncio
from collections import deque


class Deadline:
    """One attempt's deadline: its task, when it falls, and whether the timer cancelled the task for it."""

    __slots__ = ("cancelling", "done", "expired", "task", "when")

    def __init__(self, task: asyncio.Task[object], when: float) -> None:
        self.task, self.when = task, when
        self.cancelling = task.cancelling()
        """The task's pending cancellation requests at the start (a cancel from outside is not a timeout)."""
        self.done = False
        self.expired = False


class Deadlines:
    """The deadlines of one batch's attempts, ``seconds`` after each began, on the running loop.

    :meth:`enter` and :meth:`leave` bracket an attempt's ``await``. At its deadline the attempt's
    task is cancelled; :meth:`leave` then turns the ``CancelledError`` into a ``TimeoutError``
    exactly where ``asyncio.timeout`` would (no other cancellation pending). :meth:`close` stops
    the timer once the batch is over.
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.loop = asyncio.get_running_loop()
        self.pending: deque[Deadline] = deque()
        self.timer: asyncio.TimerHandle | None = None
        self.armed_for: Deadline | None = None

    def enter(self) -> Deadline:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("Deadlines.enter() must be called from a task")
        deadline = Deadline(task, self.loop.time() + self.seconds)
        self.pending.append(deadline)
        if self.timer is None:
            self._arm()
        return deadline

    def leave(self, deadline: Deadline, error: BaseException | None) -> None:
        """The attempt is over (``error``: what it raised); raises ``TimeoutError`` where its deadline cancelled it."""
        deadline.done = True
        # uncancel() first, whatever the error: the cancellation this deadline asked for is answered here
        expired = deadline.expired and deadline.task.uncancel() <= deadline.cancelling
        if expired and isinstance(error, asyncio.CancelledError):
            raise TimeoutError from error

    def close(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.timer, self.armed_for = None, None
        self.pending.clear()

    def _arm(self) -> None:
        while self.pending and self.pending[0].done:
            self.pending.popleft()
        if self.pending:
            self.armed_for = self.pending[0]
            self.timer = self.loop.call_at(self.armed_for.when, self._fire)

    def _fire(self) -> None:
        """The oldest deadline fell (the one the timer was set for, as asyncio fires it, and any others due by now)."""
        self.timer, now = None, self.loop.time()
        while self.pending:
            deadline = self.pending[0]
            if not (deadline.done or deadline is self.armed_for or deadline.when <= now):
                break
            self.pending.popleft()
            if not deadline.done:
                deadline.expired = True
                deadline.task.cancel()
        self.armed_for = None
        self._arm()
