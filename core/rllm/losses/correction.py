"""Rollout correction: truncated importance weights of the trained policy against the sampler's."""

from __future__ import annotations

from typing import Any

from rllm.contract.names import TIS_MODES
from rllm.errors import LossOptionError
from rllm.losses.choices import one_of


def truncated_is_weights(old_log_probs: Any, rollout_log_probs: Any, mask: Any, mode: str, cap: float) -> Any:
    """Truncated importance weights ``min(pi_old / pi_rollout, cap)`` per token or per sequence (no gradient).

    ``sequence`` uses the product of a sequence's token ratios (the sum of masked log-ratios),
    broadcast to its tokens. The log-ratio is clamped to ±20 so extreme rollouts stay finite.
    """
    import torch

    mode = one_of(mode, TIS_MODES, "rllm.algorithm.rollout_correction.tis_mode", "a rollout-correction level")
    if not (isinstance(cap, int | float) and cap > 0):
        raise LossOptionError(f"rllm.algorithm.rollout_correction.tis_cap must be positive; got {cap!r}.")
    log_ratio = (old_log_probs - rollout_log_probs).detach() * mask
    if mode == "sequence":
        log_ratio = log_ratio.sum(dim=-1, keepdim=True).expand_as(old_log_probs)
    weights = torch.exp(torch.clamp(log_ratio, min=-20.0, max=20.0))
    return torch.clamp(weights, max=float(cap)) * mask
