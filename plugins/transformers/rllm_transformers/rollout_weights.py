"""The transformers backend's part of the policy channel: copy the trained weights, load them where rollouts sample.

The trainer's :class:`~rllm.rollouts.policy.PolicyVersions` decides which version rollouts
sample, keeps the snapshots, and pushes to inference servers; this module only knows the model.
Rollouts sample the trained model itself in a synchronous in-process run, their own copy in an
asynchronous one (so the update can run meanwhile), or the servers' weights.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from rllm.engine import PolicyUpdate
from rllm.errors import TrainerError
from rllm.rollouts import RolloutWeights
from rllm_transformers.distributed import Distributed
from rllm_transformers.lora import merged_weights
from rllm_transformers.sync_weights import save_weights, weights_bytes
from rllm_transformers.weights import load_checked

Snapshot = dict[str, torch.Tensor]


def _unfit(problem: str) -> TrainerError:
    return TrainerError(f"The kept weights of a policy version do not fit the rollout model ({problem}).")


class ModelWeights(RolloutWeights):
    """``model`` is what the update trains (its whole weights, under FSDP gathered after each update; with servers
    under FSDP rank 0's host copy, and on the other ranks on the meta device);
    ``rollout_model`` what the in-process engine samples (``model`` itself, or a copy)."""

    overlaps = True

    def __init__(
        self,
        model: torch.nn.Module,
        rollout_model: torch.nn.Module,
        sync_directory: Callable[[], Path],
        distributed: Distributed | None,
    ) -> None:
        self.model = model
        self.rollout_model = rollout_model
        self.sync_directory = sync_directory
        self.distributed = distributed

    def snapshot(self) -> Snapshot:
        return {name: tensor.detach().clone() for name, tensor in self.model.state_dict().items()}

    def load(self, snapshot: Snapshot | None) -> None:
        if snapshot is None and self.rollout_model is self.model:
            return
        load_checked(self.rollout_model, self.model.state_dict() if snapshot is None else snapshot, _unfit)

    def server_update(self, version: int, snapshot: Snapshot | None) -> PolicyUpdate:
        """``snapshot`` (None: the model's) as a weight sync sends it (LoRA: the adapters merged)."""
        state = merged_weights(self.model, snapshot)
        directory = self.sync_directory()
        if self.distributed is not None and self.distributed.rank > 0:  # a rank resyncing a restarted server alone
            if any(tensor.is_meta for tensor in state.values()):
                raise TrainerError(
                    f"Rank {self.distributed.rank} found an inference server that lost the policy's weights, but under "
                    "FSDP with servers rank 0 alone keeps them (docs/scaling.md); run the same command again to resume "
                    "from the last checkpoint."
                )
            directory = directory / f"rank{self.distributed.rank}"
        return PolicyUpdate(
            version=version,
            save=lambda directory, dtype=None: save_weights(self.model, state, directory, dtype),
            state_bytes=lambda dtype=None: weights_bytes(state, dtype),
            directory=directory,
        )
