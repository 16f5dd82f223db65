"""One rank of tests/transformers/test_distributed.py's FSDP memory check, started by torchrun: what a rank holds.

Builds the transformers backend from the command line's overrides (FSDP, a KL term so a reference exists), then
prints one JSON line per rank: the elements of the whole model, of the reference's parameters on this rank, the
reference's log-probs against the whole model's on the same rows (and on a batch of one row, which rank 1 has no
share of), and what the rank keeps of a checkpoint's
optimizer state after ``prepare_checkpoint``.
"""

from __future__ import annotations

import sys
from types import SimpleNamespace

import torch
from rank_lines import say_in_rank_order

from rllm.config import AlgorithmConfig, load_config
from rllm_transformers.backend import TransformersBackend
from rllm_transformers.logprobs import score_tokens


def _local_elements(module: torch.nn.Module) -> int:
    """Elements of ``module``'s parameters held on this rank (a DTensor's local shard)."""
    return sum(int(getattr(p, "to_local", lambda p=p: p)().numel()) for p in module.parameters())


def main() -> None:
    config = load_config(overrides=sys.argv[1:])
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
    for parameter in backend.trained.parameters():  # one AdamW step, so the optimizer has state to gather
        parameter.grad = torch.zeros_like(parameter)
    backend.optimizer.step()
    backend.prepare_checkpoint()
    kept = backend._gathered_optimizer
    devices = sorted(
        {str(t.device) for s in (kept or {}).get("state", {}).values() for t in s.values() if torch.is_tensor(t)}
    )
    record = {
        "rank": group.rank,
        "whole": sum(p.numel() for p in backend.model.parameters()),
        "reference": _local_elements(backend.reference),
        "reference_gap": float((reference - whole).abs().max()),
        "one_row_gap": float((alone - whole[:1]).abs().max()),
        "optimizer_kept": kept is not None,
        "optimizer_devices": devices,
    }
    say_in_rank_order(group, "rank-memory", record)
    backend.shutdown()


if __name__ == "__main__":
    main()
