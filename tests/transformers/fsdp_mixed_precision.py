"""One rank of tests/transformers/test_distributed.py's FSDP mixed-precision check, started by torchrun.

Builds the transformers backend from the command line's overrides (FSDP, ``precision=bf16-mixed``, a KL term so
a sharded reference exists), then on the same rows runs a forward and a backward through the sharded copy under a
dispatch mode that records the dtype of every all-gather and reduce-scatter, a forward through the sharded
reference, and the same through the unsharded model (one process's bf16-mixed) and a float32 twin of it. Prints one
JSON line per rank: the collectives' dtypes, the dtypes of the master weights and of AdamW's state, the log-prob and
gradient gaps (sharded against one process, and bf16-mixed against float32: the size of autocast's own rounding), and
the fraction of the weights one AdamW step at lr 1e-6 changes.
"""

from __future__ import annotations

import copy
import sys
from typing import Any

import torch
from rank_lines import say_in_rank_order
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from rllm.config import AlgorithmConfig, load_config
from rllm_transformers.backend import TransformersBackend
from rllm_transformers.logprobs import score_tokens


class Collectives(TorchDispatchMode):
    """The dtypes of the tensors every c10d all-gather and reduce-scatter moves."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[str, set[str]] = {"gather": set(), "reduce": set()}

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = str(func)
        kind = "gather" if "allgather" in name else "reduce" if "reduce_scatter" in name else None
        if kind is not None:
            leaves = tree_leaves((args, kwargs or {}))
            self.seen[kind] |= {str(t.dtype) for t in leaves if isinstance(t, torch.Tensor)}
        return func(*args, **(kwargs or {}))


def _whole(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor


def _scores_and_grads(model: torch.nn.Module, ids: torch.Tensor, advantages: torch.Tensor) -> tuple[Any, Any]:
    """Log-probs and the gradient of a policy-gradient-like loss, by parameter name (whole tensors)."""
    model.zero_grad(set_to_none=True)
    log_probs = score_tokens(model, ids, torch.ones_like(ids)).log_probs
    (-(log_probs * advantages).mean()).backward()
    grads = {name: _whole(p.grad).detach().clone() for name, p in model.named_parameters()}
    return log_probs.detach().float(), grads


def _gap(mine: dict[str, torch.Tensor], theirs: dict[str, torch.Tensor]) -> float:
    """The relative distance of two gradients, all parameters together."""
    difference = sum(float((mine[k] - theirs[k]).float().pow(2).sum()) for k in theirs)
    return (difference / sum(float(t.float().pow(2).sum()) for t in theirs.values())) ** 0.5


def main() -> None:
    config = load_config(overrides=sys.argv[1:])
    backend = TransformersBackend(config, algorithm=AlgorithmConfig.from_config(config))
    group = backend.distributed
    assert group is not None and group.sharded and backend.reference is not None
    vocab = int(backend.model.get_input_embeddings().num_embeddings)
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(3, vocab, (4, 12), generator=generator)
    advantages = torch.randn(4, 11, generator=generator)
    fp32 = copy.deepcopy(backend.model)
    del fp32.forward  # the class's forward: no autocast, float32 compute
    with Collectives() as seen:
        sharded, sharded_grads = _scores_and_grads(backend.trained, ids, advantages)
    with Collectives() as seen_reference, torch.no_grad():  # the frozen reference: sharded with the same policy
        reference = score_tokens(backend.reference, ids, torch.ones_like(ids)).log_probs.float()
    mixed, mixed_grads = _scores_and_grads(backend.model, ids, advantages)
    full, full_grads = _scores_and_grads(fp32, ids, advantages)
    before = {name: _whole(p).detach().clone() for name, p in backend.trained.named_parameters()}
    optimizer = torch.optim.AdamW(backend.trained.parameters(), lr=1e-6, weight_decay=0.0)
    optimizer.step()  # the sharded gradient of the forward above
    changed = sum(int((_whole(p).detach() != before[n]).sum()) for n, p in backend.trained.named_parameters())
    record = {
        "rank": group.rank,
        "gathered": sorted(seen.seen["gather"]),
        "reduced": sorted(seen.seen["reduce"]),
        "masters": sorted({str(p.dtype) for p in backend.trained.parameters()}),
        "adam_state": sorted({str(t.dtype) for s in optimizer.state.values() for t in s.values() if t.dim()}),
        "reference_gathered": sorted(seen_reference.seen["gather"]),
        "sharded_logp_gap": float((sharded - mixed).abs().max()),
        "reference_logp_gap": float((reference - mixed).abs().max()),
        "autocast_logp_gap": float((mixed - full).abs().max()),
        "sharded_grad_gap": _gap(sharded_grads, mixed_grads),
        "autocast_grad_gap": _gap(mixed_grads, full_grads),
        "changed": changed / sum(t.numel() for t in before.values()),
    }
    say_in_rank_order(group, "mixed-precision", record)
    backend.shutdown()


if __name__ == "__main__":
    main()
