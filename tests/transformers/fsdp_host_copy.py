"""One rank of tests/transformers/test_distributed.py's check of FSDP with rollouts from servers, started by torchrun.

Builds the transformers backend from the command line's overrides (FSDP, a server URL that is never called), then
prints one JSON line per rank: the devices the policy was loaded on, how far the sharded copy's first weights are
from rank 0's (and its buffers), the whole model's elements, the elements this rank holds of its unsharded model and
of the sharded copy, the devices of the unsharded model's tensors, and after a change to the shards gathered as an
update's end gathers them, how far rank 0's host copy is from the shards' whole weights; and what the reference is.
"""

from __future__ import annotations

import sys
from typing import Any

import torch
from rank_lines import say_in_rank_order

from rllm.config import AlgorithmConfig, load_config
from rllm_transformers import backend as backend_module
from rllm_transformers.backend import TransformersBackend
from rllm_transformers.model import Policy, load_policy


def _local(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def main() -> None:
    config = load_config(overrides=sys.argv[1:])
    built: list[str] = []

    def load_and_note(*args: Any, **kwargs: Any) -> Policy:
        policy = load_policy(*args, **kwargs)
        built.extend(sorted({p.device.type for p in policy.model.parameters()}))
        return policy

    backend_module.load_policy = load_and_note
    backend = TransformersBackend(config, algorithm=AlgorithmConfig.from_config(config))
    group = backend.distributed
    assert group is not None
    first = {name: value.full_tensor() for name, value in backend.trained.state_dict().items()}
    start = backend.model.state_dict()
    gaps = [float((start[name] - value).abs().max()) for name, value in first.items()] if group.rank == 0 else None
    initial = max(gaps) if gaps else None
    with torch.no_grad():  # an update's change, the same on every rank's shard of each parameter
        for index, parameter in enumerate(p for p in backend.trained.parameters() if p.requires_grad):
            _local(parameter).add_(0.01 * (index + 1))
    group.gather_into(backend.trained, backend.model)
    whole = {name: value.full_tensor() for name, value in backend.trained.state_dict().items()}
    kept = backend.model.state_dict()
    gap = max(float((kept[name] - value).abs().max()) for name, value in whole.items()) if group.rank == 0 else None
    record = {
        "rank": group.rank,
        "host_copy": backend.host_copy,
        "whole": sum(p.numel() for p in backend.model.parameters()),
        "model_held": sum(p.numel() for p in backend.model.parameters() if not p.is_meta),
        "model_devices": sorted({p.device.type for p in backend.model.parameters()}),
        "trained_held": sum(_local(p).numel() for p in backend.trained.parameters()),
        "gathered_gap": gap,
        "built_on": built,
        "initial_gap": initial,
        "model_buffers": {name: b.tolist() for name, b in backend.model.named_buffers() if not b.is_meta},
        "trained_buffers": {name: b.tolist() for name, b in backend.trained.named_buffers()},
        "trainable": sum(p.numel() for p in backend.model.parameters() if p.requires_grad),
        "reference_on_trained": getattr(backend.reference, "module", None) is backend.trained,
        "reference_held": sum(_local(p).numel() for p in getattr(backend.reference, "parameters", lambda: [])()),
        "teacher_held": sum(_local(p).numel() for p in getattr(backend.teacher, "parameters", lambda: [])()),
    }
    say_in_rank_order(group, "host-copy", record)
    backend.shutdown()


if __name__ == "__main__":
    main()
