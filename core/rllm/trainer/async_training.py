"""Asynchronous training: the next batches are sampled while the policy updates, with bounded staleness.

``rllm.async_training.enable`` (docs/async.md). A producer task on the trainer's event loop
samples whole batches ahead, in dataloader order, from the weights the backend published
last; the trainer takes them in order and runs stages 4-7 on a worker thread, so sampling
and the update overlap. Admission control: the batch of step ``u`` starts sampling only once
step ``u - 1 - staleness_threshold`` is trained (so its samples lag the policy that trains
them by at most ``staleness_threshold`` versions), and never more than ``max_batches_ahead``
batches beyond the step training; the producer waits, it never discards a batch. A batch
samples from one weight version, so each of its groups comes from one policy. Batches
sampled but not yet trained are checkpointed as JSON (:class:`SampledBatch`), so a resumed
run trains each of them once and samples none again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections import Counter, deque
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig

from rllm.config.core_keys import MAX_STALENESS
from rllm.errors import ConfigError, TrainerError
from rllm.trainer.engine import EngineStats
from rllm.types import Episode

if TYPE_CHECKING:
    from rllm.config.algorithm import AlgorithmConfig
    from rllm.trainer.backend_protocol import BackendProtocol
    from rllm.trainer.parallel import ProcessGroup

__all__ = [
    "AheadSampler",
    "AsyncSettings",
    "SampledBatch",
    "UpdateThread",
    "check_batch_version",
    "check_weight_versions",
    "lag_metrics",
    "stamp_weight_version",
]

SECTION = "rllm.async_training"


@dataclass(frozen=True)
class AsyncSettings:
    """The ``rllm.async_training`` keys, read once."""

    enabled: bool = False
    staleness: int = 0
    """Policy versions a sample may lag behind the policy that trains on it."""
    ahead: int = 1
    """Batches sampled beyond the one training, at most."""
    allow_uncorrected: bool = False

    @classmethod
    def from_config(cls, config: DictConfig) -> AsyncSettings:
        section = config.rllm.async_training
        return cls(
            bool(section.enable),
            int(section.staleness_threshold),
            int(section.max_batches_ahead),
            bool(section.allow_uncorrected),
        )

    @property
    def lead(self) -> int:
        """How many steps beyond the one training may have their batch sampled (0: none, a synchronous run)."""
        return min(self.staleness, self.ahead)

    def check(
        self,
        backend: BackendProtocol,
        algorithm: AlgorithmConfig,
        process_group: ProcessGroup | None,
        dynamic_sampling: bool,
        rejection_mode: str,
    ) -> None:
        """Refuse, by name, what asynchronous training cannot honour; nothing when it is off."""
        if not self.enabled:
            return
        name = type(backend).__name__
        if process_group is not None:
            raise ConfigError(
                f"{SECTION}.enable=true is not supported under torchrun ({process_group.world_size} ranks): the ranks "
                f"would sample ahead independently; train in one process or set {SECTION}.enable=false."
            )
        if not backend.overlaps_rollouts:
            raise ConfigError(
                f"{SECTION}.enable=true needs a backend that samples while it updates; backend "
                f"{str(backend.config.rllm.backend)!r} ({name}) cannot: set {SECTION}.enable=false or "
                "rllm.backend=transformers."
            )
        if dynamic_sampling:
            raise ConfigError(
                f"{SECTION}.enable=true does not combine with dynamic sampling (its refill rounds sample inside a "
                "step); turn off rllm.dynamic_sampling.enable and rllm.rejection_sample.filter_uniform_groups."
            )
        if self.staleness > 0 and rejection_mode == "episode":
            raise ConfigError(
                f"{SECTION}.staleness_threshold={self.staleness} with rllm.rejection_sample in episode mode would "
                "train held-back groups later than the threshold allows; use staleness_threshold=0 or "
                "rllm.rejection_sample.mode=batch."
            )
        correction = algorithm.rollout_correction
        corrected = (
            correction.tis_mode is not None
            or correction.rollout_rs is not None
            or correction.off_policy_mask_threshold is not None
        )
        if self.staleness > 0 and not corrected and not self.allow_uncorrected:
            raise ConfigError(
                f"{SECTION}.staleness_threshold={self.staleness} trains on samples of older policies, and no "
                "rollout correction is set: set rllm.algorithm.rollout_correction.tis_mode (token or sequence), "
                "rollout_rs or off_policy_mask_threshold, or accept uncorrected off-policy updates with "
                f"{SECTION}.allow_uncorrected=true."
            )


def check_weight_versions(engine: object) -> None:
    """Refuse a rollout engine that cannot say which policy version sampled (async training labels every sample)."""
    version = getattr(engine, "weight_version", None)
    if isinstance(version, bool) or not isinstance(version, int):
        kind = type(engine)
        raise ConfigError(
            f"{SECTION}.enable=true labels every sample with the policy version that drew it, but the rollout engine "
            f"{kind.__qualname__} (module {kind.__module__}) reports no integer weight_version; give it one "
            f"(rllm.engine.RolloutEngine has it) or set {SECTION}.enable=false."
        )


def stamp_weight_version(episodes: Sequence[Episode], version: int | None) -> None:
    """Label the steps no engine call labelled (``generate`` returns no version) with the batch's version."""
    if version is None:
        return
    for episode in episodes:
        for trajectory in episode.trajectories:
            for step in trajectory.steps:
                if step.weight_version is None:
                    step.weight_version = version


def check_batch_version(episodes: Sequence[Episode], version: int) -> None:
    """Refuse a batch a step of which another policy version sampled (a server whose weights changed mid-batch):
    its groups would mix policies."""
    for episode in episodes:
        for trajectory in episode.trajectories:
            for step in trajectory.steps:
                if step.weight_version != version:
                    raise TrainerError(
                        f"Episode {episode.id} of a batch sampled from policy version {version} has a step sampled by "
                        f"weight_version {step.weight_version}: the rollout weights changed mid-batch (another "
                        "process updating the inference servers?); the run stops before mixing policies in a group."
                    )


def lag_metrics(episodes: Sequence[Episode], policy_version: int, staleness: int) -> dict[str, float]:
    """How many versions each episode lags the policy training on it (its oldest step): min, mean, max and counts.

    The counts are one key per lag ``0..staleness`` (at most :data:`~rllm.config.core_keys.MAX_STALENESS` + 1
    keys, the threshold's bound), lags beyond it (which the sampler does not admit) under ``count_over``: the
    family of keys is bounded."""
    lags = []
    for episode in episodes:
        versions = [s.weight_version for t in episode.trajectories for s in t.steps if s.weight_version is not None]
        if versions:
            lags.append(policy_version - min(versions))
    if not lags:
        return {}
    counts = Counter(lags)
    metrics = {
        "async/staleness/min": float(min(lags)),
        "async/staleness/mean": sum(lags) / len(lags),
        "async/staleness/max": float(max(lags)),
    }
    top = min(staleness, MAX_STALENESS)
    metrics.update({f"async/staleness/count_{lag}": float(counts[lag]) for lag in range(top + 1)})
    over = sum(count for lag, count in counts.items() if lag > top)
    if over:
        metrics["async/staleness/count_over"] = float(over)
    return metrics


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


class AheadSampler:
    """Samples the batches of the steps ahead on the event loop, admitting each only within the staleness bound.

    ``positions`` yields ``(epoch, index, batch)`` in training order from the first batch not
    yet sampled; ``sample(epoch, index, batch, step)`` samples one (the trainer's, which reads
    the version first). ``pending`` are batches a checkpoint held, trained first.
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
        async with self._changed:
            await self._changed.wait_for(lambda: bool(self.queue) or self._done or self._error is not None)
            if self._error is not None:
                raise self._error
            if not self.queue:
                return None, 0
            return self.queue.popleft(), len(self.queue)

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


class UpdateThread:
    """One worker thread with its own event loop: the trainer runs stages 4-7 there while the loop samples."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="rllm-update", daemon=True)
        self._thread.start()

    async def run(self, work: Coroutine[Any, Any, Any]) -> Any:
        """Run ``work`` on the thread and wait for it without blocking the caller's loop."""
        if not self._thread.is_alive():
            work.close()
            raise TrainerError("The update thread of this asynchronous run has stopped.")
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(work, self._loop))

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()
