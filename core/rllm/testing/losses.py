"""Conformance checks for a policy loss, run through :func:`rllm.losses.compute_policy_loss` (needs torch)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rllm.errors import ConformanceError, RLLMError

_INPUT = "4 sequences x 6 tokens (seed 0), the last two tokens of sequences 1 and 3 masked"


def _inputs(seed: int = 0) -> dict[str, Any]:
    import torch

    generator = torch.Generator().manual_seed(seed)
    shape = (4, 6)
    old = -torch.rand(shape, generator=generator, dtype=torch.float64) - 0.1
    log_probs = (old + 0.05 * torch.randn(shape, generator=generator, dtype=torch.float64)).requires_grad_(True)
    mask = torch.ones(shape, dtype=torch.float64)
    mask[1, 4:] = 0
    mask[3, 4:] = 0
    advantages = torch.randn(shape, generator=generator, dtype=torch.float64)
    return {"log_probs": log_probs, "old_log_probs": old, "advantages": advantages, "response_mask": mask}


def _loss(name: str, inputs: dict[str, Any], options: Mapping[str, Any], mode: str, prop: str) -> Any:
    from rllm.losses import compute_policy_loss

    try:
        loss, _ = compute_policy_loss(name, **inputs, options=dict(options), agg_mode=mode)
    except RLLMError as exc:
        raise ConformanceError(f"loss {name!r} breaks '{prop}': {type(exc).__name__}: {exc}; input: {_INPUT}") from None
    return loss


def check_loss(name: str, options: Mapping[str, Any] | None = None) -> None:
    """A scalar with a finite gradient; masked tokens change neither; every accepted mode is honoured."""
    import torch

    from rllm.losses import loss_entry

    given = dict(options or {})
    inputs = _inputs()
    modes = loss_entry(name).agg_modes or ("token-mean", "token-sum")
    mode = modes[0]
    loss = _loss(name, inputs, given, mode, "scalar")
    if not isinstance(loss, torch.Tensor) or loss.dim() != 0:
        raise ConformanceError(f"loss {name!r} breaks 'scalar': returned {loss!r}; input: {_INPUT}")
    (grad,) = torch.autograd.grad(loss, inputs["log_probs"])
    if not torch.isfinite(grad).all():
        raise ConformanceError(f"loss {name!r} breaks 'finite gradient': {grad}; input: {_INPUT}")
    masked = inputs["response_mask"] == 0
    if grad[masked].abs().max() > 0:
        raise ConformanceError(f"loss {name!r} breaks 'masked tokens contribute nothing': their gradient is nonzero")
    changed = {k: v.detach().clone() for k, v in inputs.items()}
    changed["advantages"][masked] = 1e3
    changed["log_probs"][masked] = -5.0
    changed["log_probs"].requires_grad_(True)
    other = _loss(name, changed, given, mode, "masked tokens contribute nothing")
    if not torch.isclose(other, loss, rtol=1e-9, atol=1e-12):
        raise ConformanceError(
            f"loss {name!r} breaks 'masked tokens contribute nothing': changing masked advantages and log-probs "
            f"moved the loss from {float(loss):.6g} to {float(other):.6g}; input: {_INPUT}"
        )
    if {"token-mean", "token-sum"} <= set(modes):  # a loss may declare the modes it supports
        _check_modes(name, inputs, given, loss.detach() if mode == "token-mean" else None)


def _check_modes(name: str, inputs: dict[str, Any], options: Mapping[str, Any], token_mean: Any) -> None:
    """token-sum is token-mean times the token count (a loss that aggregates with ``ctx.aggregate``)."""
    tokens = float(inputs["response_mask"].sum())
    if token_mean is None:
        token_mean = _loss(name, inputs, options, "token-mean", "aggregation modes honoured").detach()
    summed = _loss(name, inputs, options, "token-sum", "aggregation modes honoured").detach()
    if abs(float(summed) - float(token_mean) * tokens) > 1e-8 * max(1.0, abs(float(summed))):
        raise ConformanceError(
            f"loss {name!r} breaks 'aggregation modes honoured': token-sum gave {float(summed):.6g}, expected "
            f"token-mean x {tokens:g} tokens = {float(token_mean) * tokens:.6g}; input: {_INPUT}"
        )
