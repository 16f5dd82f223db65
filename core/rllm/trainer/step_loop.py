"""The trainer's one loop: take each step's batch from the batch source, train it, log, validate and save.

The batch source samples up to ``lead`` steps ahead of the step training (``lead`` 0: the
synchronous run; ``rllm.async_training`` sets it from ``staleness_threshold`` and
``max_batches_ahead``), each batch seeded by its step and sampled from the policy version
:class:`~rllm.rollouts.policy.PolicyVersions` assigns it, so a run is the same however fast its
parts ran, and at ``staleness_threshold=0`` the asynchronous run is the synchronous one exactly.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from rllm.errors import RLLMWarning, TrainerError
from rllm.rollouts.batch_source import BatchSource, SampledBatch
from rllm.rollouts.policy import PolicyVersions
from rllm.rollouts.workflow_engine import WorkflowEngine
from rllm.trainer.async_training import UpdateThread
from rllm.trainer.backend_protocol import BackendProtocol, TrainerState
from rllm.trainer.run_report import RunReport
from rllm.trainer.step_metrics import stage_timer
from rllm.trainer.trackers import Trackers
from rllm.trainer.train_step import TrainStep
from rllm.trainer.validation import Validation


@dataclasses.dataclass
class Cadence:
    """How often the loop validates and saves (``rllm.trainer.test_freq`` and ``save_freq``; 0: never)."""

    total_epochs: int
    test_freq: int
    save_freq: int


def count_steps(loader: Any, total_batches: int, total_epochs: int, warns: bool) -> int:
    """The run's steps: ``total_epochs`` passes over ``loader``, cut at ``total_batches`` when that is positive."""
    try:
        per_epoch = len(loader)
    except TypeError:
        if total_batches <= 0:
            raise TrainerError(
                "The training dataloader has no length; set rllm.trainer.total_batches to bound the run."
            ) from None
        return total_batches
    by_epochs = per_epoch * total_epochs
    if total_batches > by_epochs and warns:
        warnings.warn(
            f"rllm.trainer.total_batches={total_batches} is more than the {by_epochs} steps that "
            f"rllm.trainer.total_epochs={total_epochs} allows ({per_epoch} batches an epoch): "
            "the run stops there; raise rllm.trainer.total_epochs to train longer.",
            RLLMWarning,
            stacklevel=3,
        )
    return min(total_batches, by_epochs) if total_batches > 0 else by_epochs


class StepLoop:
    """Runs the steps of a run from ``state`` (fresh or resumed) to ``state.total_steps``."""

    def __init__(
        self,
        backend: BackendProtocol,
        engine: WorkflowEngine,
        policy: PolicyVersions,
        step: TrainStep,
        validation: Validation,
        logger: Trackers,
        report: RunReport,
        save: Callable[[TrainerState], None],
        train_dataset: Sequence[Any] | None,
        cadence: Cadence,
        overlapped: bool,
    ) -> None:
        self.backend = backend
        self.engine = engine
        self.policy = policy
        self.step = step
        self.validation = validation
        self.logger = logger
        self.report = report
        self.save = save
        self.train_dataset = train_dataset
        self.cadence = cadence
        self.overlapped = overlapped
        """Whether stages 4-7 run on an update thread while the loop samples (``rllm.async_training``)."""

    async def run(self, state: TrainerState) -> None:
        cadence = self.cadence
        pending = [SampledBatch.from_json(data) for data in state.pending]
        updates = UpdateThread() if self.overlapped else None
        source = BatchSource(
            self._positions(state, pending),
            self._sample,
            trained=state.global_step,
            last_step=state.total_steps,
            lead=self.policy.lead,
            pending=pending,
        )
        source.start()
        validated_at = saved_at = -1
        epoch_open = False
        try:
            while state.global_step < state.total_steps:
                with stage_timer("wait_rollouts", waited := {}):
                    sampled, ahead = await source.take()
                if sampled is None:
                    break
                if not epoch_open or sampled.epoch != state.epoch:
                    if epoch_open:
                        await self.backend.on_epoch_end(state)
                    state.epoch, epoch_open = sampled.epoch, True
                    await self.backend.on_epoch_start(state)
                state.reset_batch()
                state.global_step += 1
                state.timing_dict.update(waited)
                await self.backend.on_batch_start(state)
                with stage_timer("step", state.timing_dict):
                    state.episodes = sampled.episodes
                    state.timing_dict["generate"] = sampled.seconds
                    state.metrics["rollout/batches_ahead"] = float(ahead)
                    await self.step.run(state, sampled, updates)
                state.timing_dict["step"] += waited["wait_rollouts"]  # a step's time includes waiting for its batch
                self.policy.step_done(state.global_step)
                await source.step_trained()
                state.metrics.update(sampled.stats.as_metrics())
                self.report.step_done(state.global_step, sampled.stats, self.engine.timeout)
                state.batches_done = sampled.index + 1
                await self.backend.on_batch_end(state)
                timings = {f"time/{k}": v for k, v in state.timing_dict.items()}
                self.logger.log({**state.metrics, **timings}, step=state.global_step, epoch=state.epoch)
                if cadence.test_freq > 0 and state.global_step % cadence.test_freq == 0:
                    async with source.paused():
                        await self._validate_newest(state, source)
                    validated_at = state.global_step
                if cadence.save_freq > 0 and state.global_step % cadence.save_freq == 0:
                    state.pending = [batch.to_json() for batch in source.pending()]
                    self.save(state)
                    saved_at = state.global_step
            if epoch_open:
                await self.backend.on_epoch_end(state)
            async with source.paused():
                if cadence.test_freq > 0 and validated_at != state.global_step:
                    await self._validate_newest(state, source)
                if cadence.save_freq > 0 and saved_at != state.global_step:
                    state.pending = [batch.to_json() for batch in source.pending()]
                    self.save(state)
        finally:
            await source.stop()
            if updates is not None:
                updates.close()

    def _positions(self, state: TrainerState, pending: Sequence[SampledBatch]) -> Iterator[tuple[int, int, Any]]:
        """Every ``(epoch, index, batch)`` of the run in training order, from the first not yet sampled."""
        start = (pending[-1].epoch, pending[-1].index + 1) if pending else (state.epoch, state.batches_done)
        for epoch in range(start[0], self.cadence.total_epochs):
            view = TrainerState(epoch=epoch, global_step=state.global_step, total_steps=state.total_steps)
            for index, batch in enumerate(self.backend.get_dataloader(self.train_dataset, view)):
                if (epoch, index) >= start:
                    yield epoch, index, batch

    async def _sample(self, epoch: int, index: int, batch: Any, step: int) -> SampledBatch:
        """Stage 1 for ``step``: seeded by the step, sampled from the policy version the step is due."""
        version = self.policy.prepare(step)
        engine = self.engine
        engine.set_training_step(step, mode="train", epoch=epoch, version=version)
        started = time.perf_counter()
        episodes = await self.backend.generate_episodes(batch, agent_workflow_engine=engine)
        self.policy.check(episodes, version)
        return SampledBatch(
            epoch, index, step, version, episodes, dataclasses.replace(engine.stats), time.perf_counter() - started
        )

    async def _validate_newest(self, state: TrainerState, source: BatchSource) -> None:
        """Validation of the policy trained so far (nothing samples meanwhile; the next batch keeps its version)."""
        self.policy.newest_for_validation(state.global_step, source.next_step)
        await self.validation.run(state, self.logger)
