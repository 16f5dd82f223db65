"""The log-prob passes project no hidden state before the batch's first response token, and give the same numbers
after it."""

from __future__ import annotations

from extras import skip_module_without

skip_module_without("torch", "transformers", "safetensors", install="pip install 'rllm[transformers]' (CI does)")

import torch
from omegaconf import OmegaConf

from rllm_transformers.batch import token_statistics
from rllm_transformers.model import tiny_model


def test_a_start_skips_the_prompt_logits_and_keeps_every_later_value() -> None:
    torch.manual_seed(0)
    model = tiny_model(OmegaConf.create({"hidden_size": 32, "num_layers": 1}), 15, 14, 13)
    ids = torch.randint(0, 14, (3, 9))
    attention = torch.ones_like(ids)
    attention[2, 7:] = 0  # a right-padded row
    shapes: list[tuple[int, ...]] = []
    logits: list[tuple[int, ...]] = []
    model.lm_head.register_forward_pre_hook(lambda _m, args: shapes.append(tuple(args[0].shape)))
    model.register_forward_hook(lambda _m, _i, out: logits.append(tuple(out.logits.shape)))
    full = token_statistics(model, ids, attention)
    cut = token_statistics(model, ids, attention, start=4)
    assert shapes == [(3, 8, 32), (3, 4, 32)]  # the hidden states of positions 4..7 only reach the output layer
    assert logits == [(3, 0, 15)] * 2  # which projects them in chunks outside the model: it returns no logits
    for whole, part in zip(full, cut, strict=True):
        assert part.shape == whole.shape == (3, 8)
        torch.testing.assert_close(part[:, 4:], whole[:, 4:], rtol=0, atol=1e-6)
        assert torch.equal(part[:, :4], torch.zeros(3, 4))


def test_the_gradient_of_the_kept_positions_is_the_full_passes() -> None:
    torch.manual_seed(1)
    model = tiny_model(OmegaConf.create({"hidden_size": 32, "num_layers": 1}), 15, 14, 13)
    ids = torch.randint(0, 14, (2, 7))
    grads = []
    for start in (0, 3):
        model.zero_grad()
        chosen, _, _ = token_statistics(model, ids, torch.ones_like(ids), start=start)
        chosen[:, 3:].sum().backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-5, atol=1e-6)
