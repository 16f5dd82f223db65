"""The weights a weight sync writes or sends: cast once to the serving dtype, a tied ``lm_head`` not written twice.

The trainer keeps float32 master weights (``rllm.transformers.precision``); a server samples in
its own dtype, usually bfloat16, so writing float32 doubles every update's bytes for nothing.
Casting separates tensors that the model ties (Qwen2.5's ``lm_head`` is its ``embed_tokens``), and
``save_pretrained`` then writes both: a directory leaves out the names the model ties, as
``save_pretrained`` does for the uncast weights, and says the dtype it holds in its ``config.json``
so ``from_pretrained`` loads it as written. Safetensors bytes keep every name: ``rllm serve``'s
in-memory route takes a whole state dict.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from transformers import PreTrainedModel

__all__ = ["cast_weights", "save_weights", "tied_names", "weights_bytes"]


def cast_weights(state: dict[str, torch.Tensor], dtype: str | None) -> dict[str, torch.Tensor]:
    """``state`` with its floating-point tensors in ``dtype`` (a torch dtype's name; None: unchanged), detached."""
    if dtype is None:
        return {name: tensor.detach() for name, tensor in state.items()}
    target = getattr(torch, dtype)
    return {
        name: tensor.detach().to(target) if tensor.is_floating_point() else tensor for name, tensor in state.items()
    }


def tied_names(model: torch.nn.Module) -> set[str]:
    """The state dict's names whose tensor is one an earlier name already holds (a tied ``lm_head.weight``)."""
    seen: set[tuple[int, int]] = set()
    tied: set[str] = set()
    for name, tensor in model.state_dict(keep_vars=True).items():
        key = (tensor.data_ptr(), tensor.numel())
        if key in seen:
            tied.add(name)
        seen.add(key)
    return tied


def save_weights(model: PreTrainedModel, state: dict[str, torch.Tensor], directory: Path, dtype: str | None) -> None:
    """``save_pretrained`` of ``state`` in ``dtype`` into ``directory``, without the names ``model`` ties."""
    tied = tied_names(model)
    written = {name: tensor for name, tensor in cast_weights(state, dtype).items() if name not in tied}
    model.save_pretrained(directory, state_dict=written)
    if dtype is not None:
        config = directory / "config.json"
        fields = json.loads(config.read_text(encoding="utf-8"))
        fields["dtype"] = dtype
        config.write_text(json.dumps(fields, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def weights_bytes(state: dict[str, torch.Tensor], dtype: str | None) -> bytes:
    """``state`` in ``dtype`` as safetensors bytes, every name kept (tied tensors copied apart, as safetensors
    requires)."""
    from safetensors.torch import save

    return save({name: tensor.cpu().clone() for name, tensor in cast_weights(state, dtype).items()})
