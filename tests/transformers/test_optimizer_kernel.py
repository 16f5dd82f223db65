"""The backend's AdamW gives a parameter the same numbers whole or cut into FSDP-like shards, bit for bit, and the
same as the per-tensor implementation the ranks take: what lets one process, DDP and FSDP runs agree.

Torch's fused kernel is faster (19 ms against 105 of a 790 ms step at vocabulary 151,936) but not shard-invariant on
the CPU: with these gradients one element of the seven-shard run differs from the whole run's at lr 1e-3.
"""

from __future__ import annotations

from collections.abc import Callable

from extras import skip_module_without

skip_module_without("torch", "transformers", install="pip install 'rllm[transformers]' (CI does)")

import pytest
import torch
from omegaconf import DictConfig

from rllm.config import AlgorithmConfig
from rllm_transformers.backend import TransformersBackend


def _stepped(shards: int, lr: float, weight_decay: float, **implementation: bool) -> list[torch.Tensor]:
    """Five AdamW steps on parameters of uneven sizes, each cut into ``shards`` uneven pieces; the weights.

    Each step's gradient of a parameter has its own scale, 1e-6 to 1e-1: gradients all of one size hid the
    rounding in which implementations differ.
    """
    generator = torch.Generator().manual_seed(0)
    sizes = (960, 4096, 1037, 8192, 32)
    weights = [torch.randn(size, generator=generator) for size in sizes]
    pieces = [[torch.nn.Parameter(piece.clone()) for piece in w.tensor_split(shards)] for w in weights]
    optimizer = torch.optim.AdamW(
        [p for parameter in pieces for p in parameter], lr=lr, weight_decay=weight_decay, **implementation
    )
    for _ in range(5):
        for parameter, size in zip(pieces, sizes, strict=True):
            scale = 10.0 ** int(torch.randint(-6, 0, (1,), generator=generator))
            grad = torch.randn(size, generator=generator) * scale
            for piece, part in zip(parameter, grad.tensor_split(shards), strict=True):
                piece.grad = part.clone()
        optimizer.step()
    return [torch.cat([piece.detach() for piece in parameter]) for parameter in pieces]


def _one_process_implementation(tiny_config: Callable[..., DictConfig]) -> dict[str, bool]:
    config = tiny_config("rllm.backend=transformers")
    backend = TransformersBackend(config, algorithm=AlgorithmConfig.from_config(config))
    defaults = backend.optimizer.defaults
    return {key: defaults[key] for key in ("foreach", "fused") if defaults[key] is not None}


@pytest.mark.parametrize(("lr", "weight_decay"), [(1e-6, 0.0), (1e-3, 0.01), (3e-4, 0.1)])
def test_one_process_steps_as_the_sharded_ranks_do_bit_for_bit(
    tiny_config: Callable[..., DictConfig], lr: float, weight_decay: float
) -> None:
    implementation = _one_process_implementation(tiny_config)
    whole = _stepped(1, lr, weight_decay, **implementation)
    start = _stepped(1, 0.0, 0.0, **implementation)
    assert all(not torch.equal(a, b) for a, b in zip(whole, start, strict=True))  # the steps moved every parameter
    for shards in (2, 3, 7):  # each rank steps its piece of every parameter with torch's per-tensor default
        sharded = _stepped(shards, lr, weight_decay, foreach=False)
        assert all(torch.equal(a, b) for a, b in zip(whole, sharded, strict=True)), shards
