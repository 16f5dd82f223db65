"""One call that runs a loss by name on a batch, with the KL term and rollout correction a run configures.

Every caller (a backend, the verl bridge, a user's own loop, the kit) goes through
:func:`compute_policy_loss`, so its checks are the same for all of them: the settings by the
rules of the config keys they mirror, the tensors' shapes, and what the loss returns. Padding
is replaced (by selection) with neutral values before the loss sees it, so NaN or inf on
masked positions cannot reach a loss or its gradient.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rllm.errors import LossFailedError, LossOptionError, LossOutputError, RLLMError, UserCodeExit
from rllm.losses.aggregation import prompt_counts
from rllm.losses.arguments import check_arguments, check_sequence_shapes, check_shapes
from rllm.losses.context import LossContext
from rllm.losses.correction import (
    Rejection,
    check_correction,
    off_policy_sequence_mask,
    parse_rejection,
    rejection_mask,
    truncated_is_weights,
)
from rllm.losses.kl import check_kl_kind, kl_penalty
from rllm.losses.registry import resolve_loss_options
from rllm.losses.settings import LossSettings
from rllm.plugins.registry import LossEntry
from rllm.usercode import call_user


def _neutral(tensor: Any, selected: Any) -> Any:
    """``tensor`` with 0 on masked positions, by selection (NaN * 0 would stay NaN)."""
    if tensor is None:
        return None
    if hasattr(tensor, "masked_fill"):
        return tensor.masked_fill(~selected, 0.0)
    import numpy as np

    return np.where(selected, tensor, 0.0)


@dataclass(frozen=True)
class CheckedLoss:
    """Loss settings checked, with what checking resolved: a backend checks once per run, not per micro-batch."""

    settings: LossSettings
    entry: LossEntry
    options: Mapping[str, Any]
    agg_mode: str
    rejection: tuple[Rejection, ...] = ()

    @property
    def needs_rollout(self) -> bool:
        """Whether these settings read the sampler's log-probs (importance weights or rejection)."""
        return self.settings.tis_mode is not None or bool(self.rejection)


def check_loss(settings: LossSettings) -> CheckedLoss:
    """``settings`` checked (named one-line errors), for :func:`run_checked_loss`."""
    entry, resolved, mode = resolve_loss_options(settings.name, settings.options, settings.agg_mode, "agg_mode")
    check_arguments(kl_coef=settings.kl_coef, tis_cap=settings.tis_cap, entropy_coeff=settings.entropy_coeff)
    if settings.kl_coef:
        check_kl_kind(settings.kl_kind)
    check_correction(settings.tis_mode, settings.tis_cap, settings.tis_lower, settings.off_policy_mask_threshold)
    rejection = parse_rejection(settings.rollout_rs, settings.rollout_rs_threshold)
    return CheckedLoss(settings, entry, resolved, mode, rejection)


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
    agg_mode: str | None = None,
    kl_coef: float = 0.0,
    kl_kind: str = "low_var_kl",
    tis_mode: str | None = None,
    tis_cap: float = 2.0,
    tis_lower: float | None = None,
    rollout_rs: str | None = None,
    rollout_rs_threshold: str | float | None = None,
    off_policy_mask_threshold: float | None = None,
    entropy_coeff: float = 0.0,
    entropy: Any = None,
    prompt_ids: Any = None,
    dp_size: int = 1,
    batch_num_tokens: Any = None,
    global_batch_size: Any = None,
    loss_scale_factor: Any = None,
    prompt_num_tokens: Any = None,
    num_prompts: Any = None,
) -> tuple[Any, dict[str, float]]:
    """Loss ``name`` on one batch, with the KL term and rollout correction a run configures.

    Options, mode, KL kind, rollout-correction level, the numbers (by the rules of the config
    keys they mirror) and the tensors' shapes are checked first (named one-line errors).
    ``agg_mode`` None is ``token-mean``, or the mode of a loss that fixes its own. With
    ``kl_coef > 0`` the aggregated ``kl_penalty(log_probs, ref_log_probs, kl_kind)`` times
    ``kl_coef`` is added (verl's ``use_kl_loss``); with ``tis_mode`` the truncated weights of
    ``old_log_probs`` against ``rollout_log_probs`` reach the loss as ``ctx.rollout_is_weights``
    (or give weights computed elsewhere as ``rollout_is_weights``, as verl does); ``tis_lower``
    zeroes weights outside ``[tis_lower, tis_cap]`` instead (IcePop). ``rollout_rs`` with
    ``rollout_rs_threshold`` takes rejected tokens or sequences out of the response mask (verl's
    rejection, :mod:`rllm.losses.correction`); ``off_policy_mask_threshold`` drops
    negative-advantage sequences far from the sampler (TRL's mask; the normalisers keep counting
    them, as TRL's do). With ``entropy_coeff > 0`` the aggregated per-token ``entropy`` (with its
    gradient) times the coefficient is subtracted (verl's entropy bonus); losses also see it as
    ``ctx.entropy`` (TRL's top-entropy quantile selects tokens by it). ``prompt_ids`` (one per
    sequence) groups the sequences by prompt for ``agg_mode="prompt-mean"``; split into
    micro-batches, give the whole batch's ``prompt_num_tokens`` (one per sequence) and
    ``num_prompts`` too (:func:`rllm.losses.prompt_counts`). A batch without a
    response token has loss 0 and the metric ``no_response_tokens`` 1.
    """
    settings = LossSettings(
        name,
        options,
        agg_mode,
        kl_coef,
        kl_kind,
        tis_mode,
        tis_cap,
        tis_lower,
        rollout_rs,
        rollout_rs_threshold,
        off_policy_mask_threshold,
        entropy_coeff,
    )
    return run_checked_loss(
        check_loss(settings),
        log_probs=log_probs,
        old_log_probs=old_log_probs,
        advantages=advantages,
        response_mask=response_mask,
        rollout_log_probs=rollout_log_probs,
        ref_log_probs=ref_log_probs,
        rollout_is_weights=rollout_is_weights,
        entropy=entropy,
        prompt_ids=prompt_ids,
        dp_size=dp_size,
        batch_num_tokens=batch_num_tokens,
        global_batch_size=global_batch_size,
        loss_scale_factor=loss_scale_factor,
        prompt_num_tokens=prompt_num_tokens,
        num_prompts=num_prompts,
    )


def run_checked_loss(
    checked: CheckedLoss,
    *,
    log_probs: Any,
    old_log_probs: Any,
    advantages: Any,
    response_mask: Any,
    rollout_log_probs: Any = None,
    ref_log_probs: Any = None,
    rollout_is_weights: Any = None,
    entropy: Any = None,
    prompt_ids: Any = None,
    dp_size: int = 1,
    batch_num_tokens: Any = None,
    global_batch_size: Any = None,
    loss_scale_factor: Any = None,
    prompt_num_tokens: Any = None,
    num_prompts: Any = None,
) -> tuple[Any, dict[str, float]]:
    """:func:`compute_policy_loss` for settings :func:`check_loss` checked: only the batch is checked here."""
    counts = {
        "dp_size": dp_size,
        "batch_num_tokens": batch_num_tokens,
        "global_batch_size": global_batch_size,
        "loss_scale_factor": loss_scale_factor,
        "num_prompts": num_prompts,
    }
    check_arguments(**counts)
    check_sequence_shapes(log_probs, prompt_ids=prompt_ids, prompt_num_tokens=prompt_num_tokens)
    counts["prompt_num_tokens"] = prompt_num_tokens
    given = {
        "old_log_probs": old_log_probs,
        "advantages": advantages,
        "response_mask": response_mask,
        "rollout_log_probs": rollout_log_probs,
        "ref_log_probs": ref_log_probs,
        "rollout_is_weights": rollout_is_weights,
        "entropy": entropy,
    }
    check_shapes(log_probs, **given)
    if checked.settings.kl_coef and ref_log_probs is None:
        raise LossOptionError("kl_coef > 0 needs ref_log_probs (the reference policy's log-probs).")
    if checked.needs_rollout and rollout_log_probs is None:
        which = "tis_mode" if checked.settings.tis_mode is not None else "rollout_rs"
        raise LossOptionError(
            f"rllm.algorithm.rollout_correction.{which} needs rollout_log_probs (the sampler's log-probs)."
        )
    if checked.settings.entropy_coeff and entropy is None:
        raise LossOptionError("entropy_coeff > 0 needs entropy (the policy's per-token entropy, with its gradient).")
    selected = response_mask != 0
    clean = {key: _neutral(value, selected) for key, value in given.items() if key != "response_mask"}
    entropy = clean["entropy"]  # also in the context: losses may select tokens by it (TRL)
    log_probs = _neutral(log_probs, selected)
    weights = clean["rollout_is_weights"]
    if checked.settings.tis_mode is not None:
        weights = truncated_is_weights(
            clean["old_log_probs"],
            clean["rollout_log_probs"],
            response_mask,
            checked.settings.tis_mode,
            checked.settings.tis_cap,
            checked.settings.tis_lower,
        )
    clean["rollout_is_weights"] = weights
    metrics_before: dict[str, float] = {}
    if checked.rejection:  # verl's rejection: the tokens leave the mask, and its normalisers
        keep, metrics_before = rejection_mask(
            clean["old_log_probs"], clean["rollout_log_probs"], response_mask, checked.rejection
        )
        response_mask = response_mask * keep
    if checked.settings.off_policy_mask_threshold is not None:  # TRL's mask: the dropped sequences still count
        if batch_num_tokens is None:
            batch_num_tokens = response_mask.sum()
        if global_batch_size is None:
            global_batch_size = len(response_mask)
        if checked.agg_mode == "prompt-mean" and prompt_num_tokens is None and prompt_ids is not None:
            prompt_num_tokens, num_prompts = prompt_counts(response_mask, prompt_ids)
        sampler = clean["rollout_log_probs"] if rollout_log_probs is not None else clean["old_log_probs"]
        kept = off_policy_sequence_mask(
            clean["advantages"], log_probs, sampler, response_mask, checked.settings.off_policy_mask_threshold
        )
        metrics_before["off_policy_masked_fraction"] = float(1.0 - kept.float().mean()) if len(kept) else 0.0
        response_mask = response_mask * kept
        counts.update(
            batch_num_tokens=batch_num_tokens,
            global_batch_size=global_batch_size,
            prompt_num_tokens=prompt_num_tokens,
            num_prompts=num_prompts,
        )
    ctx = LossContext(
        log_probs=log_probs,
        response_mask=response_mask,
        options=dict(checked.options),
        agg_mode=checked.agg_mode,
        name=checked.settings.name,
        prompt_ids=prompt_ids,
        **clean,
        **counts,
    )
    loss, metrics = _run(checked.entry, checked.settings.name, ctx)
    metrics.update(metrics_before)
    if checked.settings.entropy_coeff:
        bonus = ctx.aggregate(entropy)
        loss = loss - checked.settings.entropy_coeff * bonus
        metrics["entropy_bonus"] = float(bonus.detach())
    if checked.settings.kl_coef:
        kl = ctx.aggregate(kl_penalty(log_probs, ctx.ref_log_probs, checked.settings.kl_kind))
        loss = loss + checked.settings.kl_coef * kl
        metrics["kl_loss"] = float(kl.detach())
        metrics["kl_coef"] = float(checked.settings.kl_coef)
    if not bool(selected.any()):
        metrics["no_response_tokens"] = 1.0
    return loss, metrics


def _run(entry: LossEntry, name: str, ctx: LossContext) -> tuple[Any, dict[str, float]]:
    """The loss's ``(loss, metrics)``, checked: an exception or a wrong return names the loss and its plugin."""
    who = f"Loss {name!r} ({entry.source.describe()})"
    fn = entry.load()
    try:
        result = call_user(fn, ctx)
    except UserCodeExit as exc:  # sys.exit() in a loss is its failure, not the end of the run
        raise LossFailedError(f"{who} {exc.how}; a loss raises an exception to fail.") from None
    except RLLMError:
        raise
    except Exception as exc:
        raise LossFailedError(f"{who} raised {type(exc).__name__}: {exc}") from exc
    if not (isinstance(result, tuple) and len(result) == 2):
        raise LossOutputError(f"{who} returned {_kind(result)}; a loss returns (loss, metrics).")
    loss, metrics = result
    if hasattr(loss, "requires_grad"):  # a torch tensor
        import torch

        if loss.dim() != 0:
            raise LossOutputError(f"{who} returned a loss of shape {tuple(loss.shape)}; it must be a scalar.")
        wants_gradient = getattr(ctx.log_probs, "requires_grad", False) and torch.is_grad_enabled()
        if wants_gradient and not loss.requires_grad:
            raise LossOutputError(
                f"{who} returned a loss without a gradient (detached, or computed from numbers); "
                "compute it from ctx.log_probs with torch operations."
            )
    elif getattr(ctx.log_probs, "requires_grad", False) or not isinstance(_number(loss), float):
        raise LossOutputError(f"{who} returned a loss of {_kind(loss)}; it must be a scalar tensor.")
    if not isinstance(metrics, Mapping):
        raise LossOutputError(f"{who} returned metrics of {_kind(metrics)}; give a dict of metric name -> number.")
    checked = {}
    for key, value in metrics.items():
        number = _number(value)
        if not isinstance(key, str) or number is None:
            raise LossOutputError(
                f"{who} returned the metric {key!r}: {_kind(value)}; metrics are numbers (call float() on a tensor)."
            )
        checked[key] = number
    return loss, checked


def _number(value: Any) -> float | None:
    """``value`` as a float if it is a real number (not a bool, not a tensor), else None."""
    import numpy as np

    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real | np.floating | np.integer):
        return None
    return float(value)


def _kind(value: Any) -> str:
    shape = getattr(value, "shape", None)
    return f"{type(value).__name__} {value!r}" if shape is None else f"a {type(value).__name__} of shape {tuple(shape)}"
