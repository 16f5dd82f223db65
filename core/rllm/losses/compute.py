"""One call that runs a loss by name on a batch, with the KL term and rollout correction a run configures."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from rllm.errors import LossOptionError
from rllm.losses.context import LossContext
from rllm.losses.correction import truncated_is_weights
from rllm.losses.kl import check_kl_kind, kl_penalty
from rllm.losses.registry import resolve_loss_options


def compute_policy_loss(
    name: str,
    *,
    log_probs: Any,
    old_log_probs: Any,
    advantages: Any,
    response_mask: Any,
    rollout_log_probs: Any = None,
    ref_log_probs: Any = None,
    rollout_is_weights: Any = None,
    options: Mapping[str, Any] | None = None,
    agg_mode: str = "token-mean",
    kl_coef: float = 0.0,
    kl_kind: str = "low_var_kl",
    tis_mode: str | None = None,
    tis_cap: float = 2.0,
    dp_size: int = 1,
    batch_num_tokens: Any = None,
    global_batch_size: Any = None,
    loss_scale_factor: Any = None,
) -> tuple[Any, dict[str, float]]:
    """Loss ``name`` on one batch, with the KL term and rollout correction a run configures.

    Options, mode, KL kind and rollout-correction level are checked first (named one-line
    errors). With ``kl_coef > 0`` the aggregated ``kl_penalty(log_probs, ref_log_probs,
    kl_kind)`` times ``kl_coef`` is added (verl's ``use_kl_loss``); with ``tis_mode`` the
    truncated weights of ``old_log_probs`` against ``rollout_log_probs`` reach the loss as
    ``ctx.rollout_is_weights`` (or give weights computed elsewhere as ``rollout_is_weights``,
    as verl does).
    """
    entry, resolved, mode = resolve_loss_options(name, options, agg_mode)
    if kl_coef:
        check_kl_kind(kl_kind)
        if not (isinstance(kl_coef, int | float) and math.isfinite(kl_coef) and kl_coef >= 0):
            raise LossOptionError(f"kl_coef must be a non-negative number; got {kl_coef!r}.")
        if ref_log_probs is None:
            raise LossOptionError("kl_coef > 0 needs ref_log_probs (the reference policy's log-probs).")
    weights = rollout_is_weights
    if tis_mode is not None:
        if rollout_log_probs is None:
            raise LossOptionError(
                "rllm.algorithm.rollout_correction.tis_mode needs rollout_log_probs (the sampler's log-probs)."
            )
        weights = truncated_is_weights(old_log_probs, rollout_log_probs, response_mask, tis_mode, tis_cap)
    ctx = LossContext(
        log_probs=log_probs,
        old_log_probs=old_log_probs,
        advantages=advantages,
        response_mask=response_mask,
        rollout_log_probs=rollout_log_probs,
        ref_log_probs=ref_log_probs,
        rollout_is_weights=weights,
        options=resolved,
        agg_mode=mode,
        dp_size=dp_size,
        batch_num_tokens=batch_num_tokens,
        global_batch_size=global_batch_size,
        loss_scale_factor=loss_scale_factor,
        name=name,
    )
    loss, metrics = entry.load()(ctx)
    metrics = dict(metrics)
    if kl_coef:
        kl = ctx.aggregate(kl_penalty(log_probs, ref_log_probs, kl_kind))
        loss = loss + kl_coef * kl
        metrics["kl_loss"] = float(kl.detach())
        metrics["kl_coef"] = float(kl_coef)
    return loss, metrics
