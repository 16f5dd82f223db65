"""How a model is cut into FSDP2 units (one per decoder layer, one for the rest), in which precision the units
gather, and how a sharded copy is filled from rank 0's weights alone, so that no other rank ever holds them whole."""

from __future__ import annotations

import copy
import itertools
from typing import Any

import torch
import torch.distributed as dist

from rllm_transformers.precision import AUTOCAST


def mixed_policy(model: torch.nn.Module) -> Any:
    """FSDP2's precision for ``model`` prepared in a mixed precision (:meth:`Precision.prepare` left it float32 weights
    and an autocast dtype): the units gather their weights in the compute dtype (half the bytes of float32, moved and
    held), the gradients are reduced and kept in float32, the shards (master weights, AdamW state) stay float32.
    None for float32 and pure runs (the weights gather in their own dtype). Autocast still runs the forward: it keeps
    softmax, log-softmax and the norms' statistics in float32, as in one process."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    compute = getattr(model, AUTOCAST, None)
    if compute is None:
        return None
    return MixedPrecisionPolicy(param_dtype=compute, reduce_dtype=torch.float32, cast_forward_inputs=False)


def _float_residual(_module: torch.nn.Module, _args: Any, output: torch.Tensor) -> torch.Tensor:
    """The embedding's rows, gathered in the compute dtype, widened to float32: the residual stream (and the rotary
    tables built in its dtype) stay float32 as autocast keeps them in one process."""
    return output.float() if output.is_floating_point() else output


def shard_by_layer(model: torch.nn.Module, policy: Any = None) -> torch.nn.Module:
    """``model`` itself under FSDP2's ``fully_shard``: one unit per decoder layer (the model's ``_no_split_modules``)
    and one for the rest (embeddings, final norm, output layer), gathering in ``policy``'s dtype
    (:func:`mixed_policy`; None: the weights' own). bench/memory.py measures the same cut."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mixed = policy if policy is not None else MixedPrecisionPolicy()
    if policy is not None and policy.param_dtype is not None:
        embeddings = getattr(model, "get_input_embeddings", lambda: None)()
        if isinstance(embeddings, torch.nn.Module):
            embeddings.register_forward_hook(_float_residual)
    blocks = set(getattr(model, "_no_split_modules", None) or ())
    for module in model.modules():
        if type(module).__name__ in blocks:
            fully_shard(module, mp_policy=mixed)
    return fully_shard(model, mp_policy=mixed)  # type: ignore[no-any-return]


def is_sharded(model: Any) -> bool:
    """Whether ``model`` is under FSDP2, or wraps a model that is (LoRA's reference, the sharded copy with its adapters
    off): its forward gathers, so every rank must run it as many times."""
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule) or isinstance(getattr(model, "module", None), FSDPModule)


def meta_twin(model: torch.nn.Module) -> torch.nn.Module:
    """A copy of ``model`` whose parameters and buffers are on the meta device (shapes, dtypes, ties, hooks and
    attributes kept; no storage): deep-copying the model itself would hold a second whole copy of its weights."""
    memo: dict[int, Any] = {}
    for tensor in itertools.chain(model.parameters(), model.buffers()):
        if id(tensor) not in memo:
            empty = torch.empty_like(tensor, device="meta")
            parameter = isinstance(tensor, torch.nn.Parameter)
            memo[id(tensor)] = torch.nn.Parameter(empty, requires_grad=tensor.requires_grad) if parameter else empty
    return copy.deepcopy(model, memo)


def shard_from_rank0(model: torch.nn.Module, device: torch.device, rank: int) -> torch.nn.Module:
    """``model`` under :func:`shard_by_layer`, built from its shape and filled from rank 0's weights: every rank
    allocates its shards only, on ``device``, and rank 0 sends the whole weights a tensor at a time (all ranks call
    it). ``model`` holds the weights on rank 0 (host memory will do) and may be on the meta device elsewhere. The
    buffers, non-persistent ones too (the rotary frequencies), are rank 0's as well."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    sharded = shard_by_layer(meta_twin(model), mixed_policy(model))
    sharded.to_empty(device=device)
    weights = model.state_dict() if rank == 0 else {}
    sent = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
    set_model_state_dict(sharded, weights, options=sent)
    own = dict(model.named_buffers()) if rank == 0 else {}
    with torch.no_grad():
        for name, buffer in sharded.named_buffers():
            if rank == 0:
                buffer.copy_(own[name])
            dist.broadcast(buffer, src=0)
    return sharded
