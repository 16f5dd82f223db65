"""Rollout correction: truncated importance weights of the trained policy against the sampler's."""

from __future__ import annotations

from typing import Any

from rllm.contract.names import TIS_MODES
from rllm.losses.arguments import check_arguments
from rllm.losses.choices import one_of


def truncated_is_weights(old_log_probs: Any, rollout_log_probs: Any, mask: Any, mode: str, cap: float) -> Any:
    """Truncated importance weights ``min(pi_old / pi_rollout, cap)`` per token or per sequence (no gradient).

    ``sequence`` uses the product of a sequence's token ratios (the sum of masked log-ratios),
    broadcast to its tokens. The log-ratio is clamped to ±20 so extreme rollouts stay finite;
    masked positions are left out by selection (their weight is 0 whatever they hold).
    """
    import torch

    mode = one_of(mode, TIS_MODES, "rllm.algorithm.rollout_correction.tis_mode", "a rollout-correction level")
    check_arguments(tis_cap=cap)
    selected = mask.bool()
    log_ratio = torch.where(selected, (old_log_probs - rollout_log_probs).detach(), 0.0)
    if mode == "sequence":
        log_ratio = log_ratio.sum(dim=-1, keepdim=True).expand_as(old_log_probs)
    weights = torch.exp(torch.clamp(log_ratio, min=-20.0, max=20.0))
    return torch.where(selected, torch.clamp(weights, max=float(cap)), 0.0)
