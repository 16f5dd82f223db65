"""The Tinker service's work queue: checked requests run one at a time, in arrival order, off the event loop.

A finished request's answer waits under its request id for ``retrieve_future`` (the SDK's
futures). Sample requests queued next to each other are taken together and sampled in batches
(:mod:`.sampling`); a sample request that finds the server idle waits a few milliseconds for
the concurrent ones a client sends with it. Unbatched (``rllm serve --tinker --reproducible``),
each sample request runs alone: its log-probs then do not depend, even in rounding, on what arrived
with it, so a seeded run repeats bit for bit.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rllm_transformers.tinker_server.sampling import BATCH_WAIT, BATCH_WINDOW, SampleJob, batches
from rllm_transformers.tinker_server.wire import Sequence, WireError, sample_output

RESULTS_KEPT = 4096
"""Answers kept for ``retrieve_future`` (a client may ask again after a dropped connection)."""
LONG_POLL = 20.0
"""Seconds ``retrieve_future`` waits for a pending answer before saying ``try_again`` (the SDK waits 45)."""

Answer = Callable[[bool], tuple[bytes, str]]
"""A finished request's body for a client that does (True) or does not take protobuf."""
Sampler = Callable[[list[SampleJob]], list[tuple[list[Sequence], list[float] | None]]]
"""What samples one batch of jobs that share weights and settings (:meth:`.trainer.TinkerTrainer.sample`)."""


@dataclass
class Pending:
    future: asyncio.Future[Answer] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class WorkQueue:
    """The queue and the answers; ``after`` runs on the event loop after each request that is not a sample;
    ``batched`` says whether sample requests queued together are sampled together."""

    def __init__(self, sampler: Sampler, after: Callable[[], None], batched: bool = True) -> None:
        self.sampler = sampler
        self.after = after
        self.batched = batched
        self.results: dict[str, Pending] = {}
        self._ids = itertools.count(1)
        self._queue: deque[tuple[str, Pending, Callable[[], Answer] | SampleJob]] = deque()
        self._worker: asyncio.Task[None] | None = None

    def submit(self, route: str, work: Callable[[], Answer] | SampleJob) -> str:
        """Queue ``work`` (a sample request as its :class:`SampleJob`); the request id its answer waits under."""
        request_id = f"req-{next(self._ids)}"
        pending = Pending()
        self.results[request_id] = pending
        for stale in list(itertools.islice(self.results, max(0, len(self.results) - RESULTS_KEPT))):
            del self.results[stale]
        self._queue.append((route, pending, work))
        if self._worker is None or self._worker.done():
            self._worker = asyncio.ensure_future(self._work())
        return request_id

    def queued_weights(self) -> set[str | None]:
        """The weights the queued sample requests read."""
        return {work.weights for _, _, work in self._queue if isinstance(work, SampleJob)}

    async def _work(self) -> None:
        while self._queue:
            route, pending, work = self._queue.popleft()
            if isinstance(work, SampleJob):
                await self._sample([(route, pending, work)])
                continue
            try:
                pending.future.set_result(await asyncio.to_thread(work))
            except Exception as exc:  # the request fails, the server carries on
                pending.future.set_result(failure(route, exc))
            self.after()

    async def _sample(self, taken: list[tuple[str, Pending, SampleJob]]) -> None:
        """Sample ``taken`` (with the sample requests queued right behind it, batched) in as few calls as their
        weights and settings allow."""
        if self.batched:
            await self._take_followers(taken)
        jobs = [job for _, _, job in taken]
        for indices in batches(jobs):
            try:
                answers = await asyncio.to_thread(self.sampler, [jobs[i] for i in indices])
            except Exception as exc:  # the batch's requests fail, the server carries on
                for i in indices:
                    taken[i][1].future.set_result(failure(taken[i][0], exc))
                continue
            for i, (sequences, prompt_logprobs) in zip(indices, answers, strict=True):
                taken[i][1].future.set_result(functools.partial(sample_output, sequences, prompt_logprobs))

    async def _take_followers(self, taken: list[tuple[str, Pending, SampleJob]]) -> None:
        """Add the sample requests queued behind ``taken`` to it; one that found the server idle first waits for the
        concurrent ones a client sends with it."""
        if not self._queue:
            loop = asyncio.get_running_loop()
            deadline, seen = loop.time() + BATCH_WAIT, -1
            while len(self._queue) != seen and loop.time() < deadline:
                seen = len(self._queue)
                await asyncio.sleep(BATCH_WINDOW)
        while self._queue and isinstance(self._queue[0][2], SampleJob):
            route, pending, job = self._queue.popleft()
            taken.append((route, pending, job))  # type: ignore[arg-type]

    async def retrieve(self, route: str, request_id: Any) -> Answer:
        """The request's answer once it is done, or ``try_again`` after :data:`LONG_POLL` seconds."""
        pending = self.results.get(request_id) if isinstance(request_id, str) else None
        if pending is None:
            raise WireError(route, "request_id", f"no request {request_id!r} on this server (it restarted?).", 404)
        try:
            return await asyncio.wait_for(asyncio.shield(pending.future), LONG_POLL)
        except TimeoutError:
            return json_answer({"type": "try_again", "request_id": request_id, "queue_state": "active"})


def failure(route: str, exc: Exception) -> Answer:
    """A failed request's answer: a refusal's own body, or the error's first line as a server error."""
    if isinstance(exc, WireError):
        return json_answer(exc.body())
    first = (str(exc).strip().splitlines() or [""])[0]
    return json_answer({"error": f"{route}: {type(exc).__name__}: {first}", "category": "server"})


def json_answer(body: dict[str, Any]) -> Answer:
    data = json.dumps(body).encode()
    return lambda proto: (data, "application/json")
