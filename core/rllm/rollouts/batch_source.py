"""The batch source: the trainer's sampled batches, in training order, up to ``lead`` steps ahead of training.

Each batch is one step's tasks, sampled by the workflow engine from one policy version and
yielded as a :class:`SampledBatch` ``(epoch, index, step, version, episodes)``. The batch of step
``u`` starts sampling only once step ``u - 1 - lead`` is trained, so ``lead`` 0 is the
synchronous run (a batch samples once the step before it trained) and ``lead`` ``k`` lets the
batches of ``k`` more steps sample while one trains (``rllm.async_training``, docs/async.md):
the source waits, it never discards a batch. Batches sampled but not yet trained are
checkpointed as JSON, so a resumed run trains each of them once and samples none again.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from rllm.rollouts.workflow_engine import EngineStats
from rllm.types import Episode

__all__ = ["BatchSource", "SampledBatch"]


@dataclass
class SampledBatch:
    """One step's batch, sampled ahead: where it sits in the data, the version that sampled it, its episodes."""

    epoch: int
    index: int
    """Its position in the epoch's batches."""
    step: int
    """The training step it is for."""
    version: int
    episodes: list[Episode]
    stats: EngineStats
    seconds: float = 0.0
    """Wall time its sampling took."""

    def to_json(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "index": self.index,
            "step": self.step,
            "version": self.version,
            "episodes": [episode.to_dict() for episode in self.episodes],
            "stats": dataclasses.asdict(self.stats),
            "seconds": self.seconds,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SampledBatch:
        counts = ("epoch", "index", "step", "version")
        for key in counts:
            if type(data[key]) is not int or data[key] < 0:
                raise ValueError(f"a sampled batch holds {key}={data[key]!r}, not a count")
        return cls(
            *(data[key] for key in counts),
            [Episode.from_dict(episode) for episode in data["episodes"]],
            EngineStats(**{key: int(value) for key, value in data["stats"].items()}),
            float(data["seconds"]),
        )


class BatchSource:
    """Samples the batches of the steps ahead on the event loop, admitting each only ``lead`` steps ahead.

    ``positions`` yields ``(epoch, index, batch)`` in training order from the first batch not
    yet sampled; ``sample(epoch, index, batch, step)`` samples one (the trainer's, which puts
    the rollouts on the step's policy version first). ``pending`` are batches a checkpoint
    held, trained first. With ``lead`` 0 nothing samples in the background: :meth:`take` samples
    the next batch on the caller's task, so that the collectives of a data-parallel run (each
    rank's share of a batch is gathered) come in the same order on every rank.
    """

    def __init__(
        self,
        positions: Iterator[tuple[int, int, Any]],
        sample: Callable[[int, int, Any, int], Awaitable[SampledBatch]],
        *,
        trained: int,
        last_step: int,
        lead: int,
        pending: Sequence[SampledBatch] = (),
    ) -> None:
        self.positions = positions
        self.sample = sample
        self.trained = trained
        """Steps trained so far."""
        self.last_step = last_step
        self.lead = lead
        self.queue: deque[SampledBatch] = deque(pending)
        self.next_step = trained + 1 + len(self.queue)
        self._changed = asyncio.Condition()
        self._pauses = 0
        self._sampling = False
        self._done = False
        self._error: BaseException | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self.lead > 0:
            self._task = asyncio.ensure_future(self._produce())

    def _admitted(self, step: int) -> bool:
        return self._pauses == 0 and step <= self.trained + 1 + self.lead

    async def _produce(self) -> None:
        try:
            for epoch, index, batch in self.positions:
                step = self.next_step
                if step > self.last_step:
                    break
                async with self._changed:
                    await self._changed.wait_for(lambda step=step: self._admitted(step))  # type: ignore[misc]
                    self._sampling = True
                try:
                    sampled = await self.sample(epoch, index, batch, step)
                finally:
                    async with self._changed:
                        self._sampling = False
                        self._changed.notify_all()
                async with self._changed:
                    self.queue.append(sampled)
                    self.next_step += 1
                    self._changed.notify_all()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # the trainer raises it when it next takes a batch
            self._error = exc
        finally:
            async with self._changed:
                self._done = True
                self._changed.notify_all()

    async def take(self) -> tuple[SampledBatch | None, int]:
        """The next step's batch (None: the data is exhausted) and how many more were sampled ahead of it."""
        if self._task is None and not self.queue:
            return await self._sample_next(), 0
        async with self._changed:
            await self._changed.wait_for(lambda: bool(self.queue) or self._done or self._error is not None)
            if self._error is not None:
                raise self._error
            if not self.queue:
                return None, 0
            return self.queue.popleft(), len(self.queue)

    async def _sample_next(self) -> SampledBatch | None:
        """``lead`` 0: the next batch, sampled now."""
        position = next(self.positions, None)
        if position is None or self.next_step > self.last_step:
            return None
        sampled = await self.sample(*position, self.next_step)
        self.next_step += 1
        return sampled

    async def step_trained(self) -> None:
        """One more step trained (and its weights published): admit the batches that were waiting for it."""
        async with self._changed:
            self.trained += 1
            self._changed.notify_all()

    @asynccontextmanager
    async def paused(self) -> AsyncIterator[None]:
        """No sampling inside (validation samples with the newest weights): waits for the batch sampling now."""
        async with self._changed:
            self._pauses += 1
            await self._changed.wait_for(lambda: not self._sampling)
        try:
            yield
        finally:
            async with self._changed:
                self._pauses -= 1
                self._changed.notify_all()

    def pending(self) -> list[SampledBatch]:
        """The batches sampled and not yet trained, in training order (what a checkpoint keeps)."""
        return list(self.queue)

    async def stop(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
