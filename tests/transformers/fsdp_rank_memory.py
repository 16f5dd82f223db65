"""One rank of tests/transformers/test_distributed.py's FSDP memory check, started by torchrun: what a rank holds.

Builds the transformers backend from the command line's overrides (FSDP, a KL term so a reference exists), then
prints one JSON line per rank: the elements of the whole model, of the reference's parameters on this rank, the
reference's log-probs against the whole model's on the same rows (and on a batch of one row, which rank 1 has no
share of), what the rank keeps of a checkpoint's
optimizer state after ``prepare_checkpoint``, and, the checkpoint written (to ``--checkpoint DIR``) and read back, which
files the rank read and how far its optimizer shard is from the one written.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from rank_lines import say_in_rank_order
from safetensors.torch import load_file

from rllm.config import AlgorithmConfig, load_config
from rllm_transformers import checkpoint as checkpoint_module
from rllm_transformers.backend import TransformersBackend
from rllm_transformers.logprobs import score_tokens


def _local_elements(module: torch.nn.Module) -> int:
    """Elements of ``module``'s parameters held on this rank (a DTensor's local shard)."""
    return sum(int(getattr(p, "to_local", lambda p=p: p)().numel()) for p in module.parameters())


def _local(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def main() -> None:
    overrides = sys.argv[1:]
    if "--checkpoint" in overrides:
        at = overrides.index("--checkpoint")
        overrides = overrides[:at] + overrides[at + 2 :]
    config = load_config(overrides=overrides)
    backend = TransformersBackend(config, algorithm=AlgorithmConfig.from_config(config))
    group = backend.distributed
    assert group is not None and backend.reference is not None
    ids = torch.randint(
        3, int(backend.model.get_input_embeddings().num_embeddings), (3, 9), generator=torch.Generator().manual_seed(0)
    )
    attention = torch.ones_like(ids)
    with torch.no_grad():
        reference = score_tokens(backend.reference, ids, attention).log_probs
        whole = score_tokens(backend.model, ids, attention).log_probs
        one_row = SimpleNamespace(rows=1, ids=ids[:1], attention=attention[:1], start=0, mask=whole[:1])
        alone = backend._statistics(backend.reference, one_row)[0]  # rank 1 has no row, yet joins the forward
    for index, parameter in enumerate(backend.trained.parameters()):  # one AdamW step: state to gather
        parameter.grad = torch.full_like(parameter, 0.01 * (index + 1))
    backend.optimizer.step()
    backend.prepare_checkpoint()
    kept = backend._gathered_optimizer
    devices = sorted(
        {str(t.device) for s in (kept or {}).get("state", {}).values() for t in s.values() if torch.is_tensor(t)}
    )
    # the checkpoint written by rank 0 and read back: rank 0 alone reads the optimizer's tensors and sends them
    directory = Path(sys.argv[sys.argv.index("--checkpoint") + 1]) if "--checkpoint" in sys.argv else None
    assert directory is not None
    if group.rank == 0:
        backend.save_checkpoint(directory)
    group.barrier()
    before = [_local(s["exp_avg_sq"]).clone() for s in backend.optimizer.state.values()]
    for entry in backend.optimizer.state.values():
        _local(entry["exp_avg_sq"]).zero_()
    read: list[str] = []

    def load_and_note(path: str, *args: Any, **kwargs: Any) -> Any:
        read.append(Path(path).name)
        return load_file(path, *args, **kwargs)

    checkpoint_module.load_file = load_and_note
    backend.load_checkpoint(directory)
    backend._load_sharded()
    after = [_local(s["exp_avg_sq"]) for s in backend.optimizer.state.values()]
    record = {
        "rank": group.rank,
        "whole": sum(p.numel() for p in backend.model.parameters()),
        "reference": _local_elements(backend.reference),
        "reference_gap": float((reference - whole).abs().max()),
        "one_row_gap": float((alone - whole[:1]).abs().max()),
        "optimizer_kept": kept is not None,
        "optimizer_devices": devices,
        "files_read": sorted(read),
        "restored_gap": max(float((a - b).abs().max()) for a, b in zip(after, before, strict=True)),
        "restored_size": sum(float(b.abs().sum()) for b in before),
    }
    say_in_rank_order(group, "rank-memory", record)
    backend.shutdown()


if __name__ == "__main__":
    main()
