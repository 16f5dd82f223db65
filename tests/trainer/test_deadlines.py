"""One timer for a batch's episode deadlines behaves as ``asyncio.timeout`` per episode (rllm.workflow.timeout)."""

from __future__ import annotations

import asyncio
import sys

import pytest

from rllm.rollouts.deadlines import Deadlines
from rllm.rollouts.workflow_engine import _within

pytestmark = pytest.mark.skipif(sys.version_info < (3, 11), reason="Python 3.10 takes asyncio.wait_for")

LIMIT = 0.15


async def _outcomes(durations: list[float], starts: list[float], shared: bool) -> list[str]:
    """Each attempt sleeps ``durations[i]`` after starting at ``starts[i]``: 'done', 'timeout' or 'cancelled'."""
    deadlines = Deadlines(LIMIT) if shared else None

    async def attempt(duration: float, start: float) -> str:
        await asyncio.sleep(start)
        try:
            if deadlines is None:
                async with asyncio.timeout(LIMIT):
                    await asyncio.sleep(duration)
            else:
                await _within(asyncio.sleep(duration), LIMIT, deadlines)
        except TimeoutError:
            return "timeout"
        return "done"

    jobs = [asyncio.ensure_future(attempt(d, s)) for d, s in zip(durations, starts, strict=True)]
    results = await asyncio.gather(*jobs, return_exceptions=True)
    if deadlines is not None:
        deadlines.close()
    return [r if isinstance(r, str) else type(r).__name__ for r in results]


def test_each_attempt_times_out_after_its_own_start_as_asyncio_timeout_does() -> None:
    # attempts that begin later have later deadlines; the short ones between them finish
    durations = [0.01, 0.5, 0.02, 0.5, 0.05, 0.09]
    starts = [0.0, 0.0, 0.05, 0.1, 0.12, 0.1]
    expected = ["done", "timeout", "done", "timeout", "done", "done"]
    assert asyncio.run(_outcomes(durations, starts, shared=False)) == expected
    assert asyncio.run(_outcomes(durations, starts, shared=True)) == expected


def test_a_late_attempt_is_cut_at_its_own_deadline_not_the_first_ones() -> None:
    async def run() -> tuple[str, float]:
        deadlines = Deadlines(LIMIT)
        loop = asyncio.get_running_loop()

        async def late() -> tuple[str, float]:
            await asyncio.sleep(0.1)
            began = loop.time()
            try:
                await _within(asyncio.sleep(1.0), LIMIT, deadlines)
            except TimeoutError:
                return "timeout", loop.time() - began
            return "done", loop.time() - began

        first = asyncio.ensure_future(_within(asyncio.sleep(0.01), LIMIT, deadlines))
        outcome = await late()
        await first
        deadlines.close()
        return outcome

    outcome, waited = asyncio.run(run())
    assert outcome == "timeout"
    assert LIMIT - 0.01 <= waited < LIMIT + 0.1  # its own 0.15 s, not the first attempt's deadline at 0.15 s from 0


def test_a_cancel_from_outside_stays_a_cancellation() -> None:
    async def run() -> str:
        deadlines = Deadlines(LIMIT)
        job = asyncio.ensure_future(_within(asyncio.sleep(1.0), LIMIT, deadlines))
        await asyncio.sleep(0.01)
        job.cancel()
        try:
            await job
        except asyncio.CancelledError:
            return "cancelled"
        finally:
            deadlines.close()
        return "done"

    assert asyncio.run(run()) == "cancelled"


def test_an_attempt_that_swallows_its_cancellation_returns_its_result_and_is_uncancelled() -> None:
    async def stubborn() -> str:
        try:
            await asyncio.sleep(1.0)
        except asyncio.CancelledError:
            return "kept"
        return "slept"

    async def run() -> tuple[str, int]:
        deadlines = Deadlines(0.05)
        result = await _within(stubborn(), 0.05, deadlines)
        deadlines.close()
        task = asyncio.current_task()
        assert task is not None
        return result, task.cancelling()

    assert asyncio.run(run()) == ("kept", 0)
