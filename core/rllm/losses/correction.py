"""Rollout correction: importance weights and rejection masks of the trained policy against the sampler's.

The old policy's log-probs ``old`` and the sampler's ``rollout`` give the per-token log-ratio
``old - rollout``. From it come truncated importance weights (``tis_mode``, capped at
``tis_cap``; with ``tis_lower`` weights outside ``[tis_lower, tis_cap]`` are zeroed instead,
IcePop's token mask), rejection by divergence (``rollout_rs``: tokens or whole sequences whose
k1/k2/k3 estimate passes its threshold leave the response mask, verl's ``rollout_corr_helper``)
and TRL's off-policy sequence mask (sequences with a negative advantage whose mean KL to the
sampler exceeds ``off_policy_mask_threshold`` leave the loss). All of it is computed without a
gradient; the log-ratio is clamped to ±20 before it is exponentiated.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from rllm.contract.names import REJECTION_MODES, TIS_MODES
from rllm.errors import LossOptionError
from rllm.losses.arguments import check_arguments
from rllm.losses.choices import one_of

SAFETY_BOUND = 20.0
"""The log-ratio is clamped to this bound before ``exp`` (as verl does), so extreme rollouts stay finite."""
_RS_KEY = "rllm.algorithm.rollout_correction.rollout_rs"
_RS_THRESHOLD_KEY = "rllm.algorithm.rollout_correction.rollout_rs_threshold"


@dataclass(frozen=True)
class Rejection:
    """One rejection criterion: a ``REJECTION_MODES`` name and its bounds (``lower`` only for k1, as a log)."""

    mode: str
    upper: float
    lower: float | None = None


def parse_rejection(modes: str | None, thresholds: str | float | None) -> tuple[Rejection, ...]:
    """``rollout_rs`` (comma-separated modes) with ``rollout_rs_threshold`` (one, or one per mode), checked.

    A k1 threshold is a ratio bound ``upper`` (the lower bound is then ``1/upper``) or
    ``"lower_upper"``; the others are one positive upper bound. Errors name the key.
    """
    if modes is None:
        return ()
    names = list(dict.fromkeys(part.strip() for part in str(modes).split(",") if part.strip()))
    if not names:
        raise LossOptionError(
            f"{_RS_KEY}={modes!r} names no criterion; use one or more of {', '.join(REJECTION_MODES)}."
        )
    for name in names:
        one_of(name, REJECTION_MODES, _RS_KEY, "a rejection criterion")
    if thresholds is None or isinstance(thresholds, bool):
        raise LossOptionError(f"{_RS_KEY}={modes!r} needs {_RS_THRESHOLD_KEY} (e.g. 2.0, or '0.5_2.0' for a k1 mode).")
    specs = [part.strip() for part in str(thresholds).split(",") if part.strip()]
    if len(specs) == 1:
        specs = specs * len(names)
    if len(specs) != len(names):
        raise LossOptionError(
            f"{_RS_THRESHOLD_KEY}={thresholds!r} gives {len(specs)} thresholds for {len(names)} criteria of "
            f"{_RS_KEY}; give one shared threshold or one per criterion, comma-separated."
        )
    return tuple(_rejection(name, spec, thresholds) for name, spec in zip(names, specs, strict=True))


def _rejection(name: str, spec: str, given: Any) -> Rejection:
    bad = LossOptionError(
        f"{_RS_THRESHOLD_KEY}={given!r}: {spec!r} is not a threshold for {name}; give a positive number"
        + (" or 'lower_upper' with 0 < lower <= upper." if name.endswith("k1") else " (one upper bound).")
    )
    parts = spec.split("_", 1)
    if len(parts) == 2 and not name.endswith("k1"):
        raise bad
    try:
        bounds = [float(part) for part in parts]
    except ValueError:
        raise bad from None
    if not all(math.isfinite(b) and b > 0 for b in bounds) or (len(bounds) == 2 and bounds[0] > bounds[1]):
        raise bad
    if not name.endswith("k1"):
        return Rejection(name, bounds[0])
    lower, upper = bounds if len(bounds) == 2 else (1.0 / bounds[0], bounds[0])
    return Rejection(name, math.log(upper), math.log(lower))


def check_correction(
    tis_mode: str | None, tis_cap: float, tis_lower: float | None, off_policy_mask_threshold: float | None
) -> None:
    """The importance-weight and off-policy-mask settings by their keys' rules (one-line errors)."""
    if tis_mode is not None:
        one_of(tis_mode, TIS_MODES, "rllm.algorithm.rollout_correction.tis_mode", "a rollout-correction level")
    check_arguments(tis_cap=tis_cap)
    if tis_lower is not None and not (isinstance(tis_lower, int | float) and 0 < tis_lower <= tis_cap):
        raise LossOptionError(
            f"rllm.algorithm.rollout_correction.tis_lower={tis_lower!r} must be a number in (0, tis_cap={tis_cap}]."
        )
    if off_policy_mask_threshold is not None and not (
        isinstance(off_policy_mask_threshold, int | float) and off_policy_mask_threshold >= 0
    ):
        raise LossOptionError(
            "rllm.algorithm.rollout_correction.off_policy_mask_threshold="
            f"{off_policy_mask_threshold!r} must be a number >= 0 (a mean KL per token)."
        )


def truncated_is_weights(
    old_log_probs: Any, rollout_log_probs: Any, mask: Any, mode: str, cap: float, lower: float | None = None
) -> Any:
    """Importance weights ``pi_old / pi_rollout`` per token or per sequence, truncated (no gradient).

    ``sequence`` uses the product of a sequence's token ratios (the sum of masked log-ratios),
    broadcast to its tokens. Without ``lower`` the weights are clamped at ``cap`` (TIS); with it,
    weights outside ``[lower, cap]`` become 0 (IcePop). Masked positions get weight 0 by selection.
    """
    import torch

    check_correction(mode, cap, lower, None)
    selected = mask.bool()
    log_ratio = torch.where(selected, (old_log_probs - rollout_log_probs).detach(), 0.0)
    if mode == "sequence":
        log_ratio = log_ratio.sum(dim=-1, keepdim=True).expand_as(old_log_probs)
    weights = torch.exp(torch.clamp(log_ratio, min=-SAFETY_BOUND, max=SAFETY_BOUND))
    if lower is None:
        return torch.where(selected, torch.clamp(weights, max=float(cap)), 0.0)
    kept = selected & (weights >= float(lower)) & (weights <= float(cap))
    return torch.where(kept, weights, 0.0)


def rejection_mask(
    old_log_probs: Any, rollout_log_probs: Any, mask: Any, criteria: tuple[Rejection, ...]
) -> tuple[Any, dict[str, float]]:
    """1 where a token passes every criterion (a sequence-level one keeps or drops all its tokens), else 0.

    Returns the keep mask (``mask``'s dtype, 0 on padding) and the fraction of response tokens
    and of sequences each criterion and all of them reject.
    """
    import torch

    selected = mask.bool()
    log_ratio = torch.where(selected, (old_log_probs - rollout_log_probs).detach(), 0.0)
    log_ratio = torch.clamp(log_ratio, min=-SAFETY_BOUND, max=SAFETY_BOUND)
    per_token = {"k1": -log_ratio, "k2": 0.5 * log_ratio**2, "k3": torch.exp(log_ratio) - 1.0 - log_ratio}
    counts = selected.sum(dim=-1)
    keep = selected.clone()
    metrics: dict[str, float] = {}
    n_tokens = max(int(counts.sum()), 1)
    for rule in criteria:
        level, estimate = rule.mode.rsplit("_", 1)
        values = torch.where(selected, per_token[estimate], 0.0)
        if level == "token":
            stat = values
        elif level == "seq_sum":
            stat = values.sum(dim=-1, keepdim=True)
        elif level == "seq_mean":
            stat = values.sum(dim=-1, keepdim=True) / counts.clamp(min=1).unsqueeze(-1)
        else:  # seq_max: the largest token estimate of the response (0 for an empty one)
            stat = torch.where(selected, values, -math.inf).amax(dim=-1, keepdim=True)
            stat = torch.where(counts.unsqueeze(-1) > 0, stat, 0.0)
        passed = stat <= rule.upper
        if rule.lower is not None:
            passed = passed & (stat >= rule.lower)
        passed = passed.expand_as(selected)
        rejected = selected & ~passed
        metrics[f"rollout_rs/{rule.mode}_masked_fraction"] = float(rejected.sum()) / n_tokens
        keep = keep & passed
    dropped = selected & ~keep
    metrics["rollout_rs/masked_fraction"] = float(dropped.sum()) / n_tokens
    metrics["rollout_rs/seq_masked_fraction"] = float(dropped.any(dim=-1).float().mean()) if len(mask) else 0.0
    return keep.to(mask.dtype), metrics


def off_policy_sequence_mask(
    advantages: Any, log_probs: Any, sampler_log_probs: Any, mask: Any, threshold: float
) -> Any:
    """TRL's off-policy sequence mask (DeepSeek-V3.2): 0 for a sequence with a negative advantage and a large KL.

    The KL is the mean over the response of ``sampler - current`` log-probs (a NaN the sampler
    could not score counts 0); a sequence's advantage is its masked mean. Shape ``(batch, 1)``.
    """
    import torch

    selected = mask.bool()
    kl = torch.nan_to_num(torch.where(selected, sampler_log_probs - log_probs.detach(), 0.0), nan=0.0)
    count = selected.sum(dim=-1, keepdim=True).clamp(min=1)
    mean_kl = kl.sum(dim=-1, keepdim=True) / count
    advantage = torch.where(selected, advantages, 0.0).sum(dim=-1, keepdim=True) / count
    return ((advantage >= 0) | (mean_kl <= threshold)).to(mask.dtype)
