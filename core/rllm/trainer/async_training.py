"""Asynchronous training's settings, and the thread the update runs on while the next batches sample.

``rllm.async_training.enable`` (docs/async.md): the trainer takes its batches from a
:class:`~rllm.rollouts.batch_source.BatchSource` sampling up to ``lead`` steps ahead, and
runs stages 4-7 on an :class:`UpdateThread` so that sampling and the update overlap. The
policy versions are :class:`~rllm.rollouts.policy.PolicyVersions`'.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig

from rllm.errors import ConfigError, TrainerError
from rllm.rollouts.batch_source import BatchSource, SampledBatch

if TYPE_CHECKING:
    from rllm.config.algorithm import AlgorithmConfig
    from rllm.rollouts.parallel import ProcessGroup
    from rllm.rollouts.policy import RolloutWeights

AheadSampler = BatchSource
"""The batch source's earlier name."""

__all__ = ["AheadSampler", "AsyncSettings", "SampledBatch", "UpdateThread"]

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
        return min(self.staleness, self.ahead) if self.enabled else 0

    def check(
        self,
        backend_name: str,
        weights: RolloutWeights,
        algorithm: AlgorithmConfig,
        process_group: ProcessGroup | None,
        dynamic_sampling: bool,
        rejection_mode: str,
    ) -> None:
        """Refuse, by name, what asynchronous training cannot honour; nothing when it is off."""
        if not self.enabled:
            return
        if process_group is not None:
            raise ConfigError(
                f"{SECTION}.enable=true is not supported under torchrun ({process_group.world_size} ranks): the ranks "
                f"would sample ahead independently; train in one process or set {SECTION}.enable=false."
            )
        if not weights.overlaps:
            raise ConfigError(
                f"{SECTION}.enable=true needs a backend that samples while it updates; backend {backend_name} "
                f"cannot: set {SECTION}.enable=false or rllm.backend=transformers."
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
