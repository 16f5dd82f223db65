"""TRL's ``GRPOTrainer`` loss types as rllm losses, in torch (TRL itself is not needed to run them).

TRL 1.16 chooses its loss with ``GRPOConfig.loss_type``; each type is a per-token objective and
a normalisation. Here the objective is the function and the normalisation is the aggregation
mode the loss declares (``rllm losses trl.dapo`` lists it), with the counts a caller passes
(``batch_num_tokens``, ``global_batch_size``, ``loss_scale_factor``) standing for TRL's
normalisers:

========== ============================== ==================================================
loss       objective                       TRL's normalisation = rllm's mode
========== ============================== ==================================================
trl.grpo   PPO clip (two-sided, ``delta``) per-sequence token mean, mean over sequences
trl.bnpo   PPO clip                        ``token-mean`` over the micro-batch's tokens (below)
trl.dr_grpo PPO clip                       token sum / (sequences x ``max_completion_length``)
trl.dapo   PPO clip                        token sum / the batch's tokens (``token-mean``)
trl.luspo  PPO clip                        per-sequence token sum, mean over sequences
trl.cispo  ``-min(ratio, cap) A log p``    ``token-mean``
trl.sapo   sigmoid gate on the ratio       as ``trl.grpo``
trl.vespo  ``-phi(w) A log p``, gamma      ``token-mean``
           weight of the sequence ratio
========== ============================== ==================================================

TRL's ``bnpo`` and ``dapo`` differ only in the count their token mean divides by: ``dapo`` the
tokens of the accumulated batch, ``bnpo`` those of the micro-batch. Both are ``token-mean`` here;
the caller passes the count (:func:`rllm_trl.trainer.loss_counts` passes the micro-batch's for
``trl.bnpo``), so in an rllm backend, which passes the whole batch's, ``trl.bnpo`` is ``trl.dapo``.

Every loss takes TRL's ``importance_sampling_level`` (``sequence``: one ratio per sequence, the
exponential of its mean log-ratio, gradient through every token) and ``top_entropy_quantile``
(keep only the policy-gradient terms of the tokens whose entropy is in the top share of the
response tokens the loss sees; the KL term a caller adds is not masked, as in TRL). Option
names are ``GRPOConfig``'s fields. Rollout-correction weights multiply the token losses, except
in ``trl.vespo``, which folds them into its sequence weight as TRL folds vLLM's ratios.
"""

from __future__ import annotations

import math

import torch

from rllm.errors import LossOptionError
from rllm.losses import LossContext

Result = tuple[torch.Tensor, dict[str, float]]


def _selected(ctx: LossContext) -> torch.Tensor:
    return ctx.response_mask.bool()


def _coefficient(ctx: LossContext, log_ratio: torch.Tensor) -> torch.Tensor:
    """The importance ratio, per token or (``sequence``) one per sequence as a ``(batch, 1)`` column."""
    if ctx.options["importance_sampling_level"] == "token":
        return torch.exp(log_ratio)
    mask = ctx.response_mask.to(log_ratio.dtype)
    mean = (log_ratio * mask).sum(-1, keepdim=True) / mask.sum(-1, keepdim=True).clamp(min=1.0)
    return torch.exp(mean)


def _entropy_keep(ctx: LossContext) -> torch.Tensor | None:
    """Tokens whose entropy reaches the ``1 - top_entropy_quantile`` quantile of the response tokens, or None.

    The threshold is computed in float32 over the tokens given, as TRL computes it on one process.
    """
    share = ctx.options["top_entropy_quantile"]
    if share >= 1.0:
        return None
    if ctx.entropy is None:
        raise LossOptionError(
            f"Loss {ctx.name!r} with top_entropy_quantile={share} needs the policy's per-token entropy; "
            "this caller passes none (pass entropy= to compute_policy_loss)."
        )
    selected = _selected(ctx)
    values = ctx.entropy.detach()
    chosen = values[selected].float()
    if chosen.numel() == 0:
        return torch.zeros_like(selected)
    threshold = torch.quantile(chosen, 1.0 - share)
    return (values >= threshold) & selected


def _finish(ctx: LossContext, per_token: torch.Tensor, weighted: bool = True) -> torch.Tensor:
    """Token losses (a ``(batch, 1)`` column is every token's) weighted and entropy-selected, not yet reduced."""
    per_token = per_token.expand_as(ctx.log_probs)
    if weighted and ctx.rollout_is_weights is not None:
        per_token = per_token * ctx.rollout_is_weights
    keep = _entropy_keep(ctx)
    return per_token if keep is None else per_token * keep.to(per_token.dtype)


def _masked_mean(values: torch.Tensor, ctx: LossContext) -> float:
    values = values.expand_as(ctx.log_probs)
    selected = _selected(ctx)
    return float(torch.where(selected, values.float(), 0.0).sum() / selected.sum().clamp(min=1))


def _epsilons(ctx: LossContext) -> tuple[float, float]:
    low, high = ctx.options["epsilon"], ctx.options["epsilon_high"]
    return low, (low if high is None else high)


def clipped(ctx: LossContext) -> Result:
    """TRL's PPO clip, ``-min(r A, clip(r, 1 - eps, 1 + eps_high) A)`` (``r`` capped at ``delta``), by the mode.

    ``trl.grpo``, ``trl.bnpo``, ``trl.dr_grpo``, ``trl.dapo`` and ``trl.luspo`` are this objective under
    their modes.
    """
    per_token, metrics = _clip_objective(ctx)
    return ctx.aggregate(per_token), metrics


def _clip_objective(ctx: LossContext) -> tuple[torch.Tensor, dict[str, float]]:
    low, high = _epsilons(ctx)
    delta = ctx.options["delta"]
    adv = ctx.advantages
    ratio = _coefficient(ctx, ctx.log_probs - ctx.old_log_probs)
    bounded = torch.clamp(ratio, 1 - low, 1 + high)
    capped = ratio if delta is None else torch.clamp(ratio, max=delta)
    per_token = -torch.minimum(capped * adv, bounded * adv)
    low_clipped = ((ratio < 1 - low) & (adv < 0)).to(adv.dtype)
    high_clipped = ((ratio > 1 + high) & (adv > 0)).to(adv.dtype)
    return _finish(ctx, per_token), {
        "clip_ratio/low_mean": _masked_mean(low_clipped, ctx),
        "clip_ratio/high_mean": _masked_mean(high_clipped, ctx),
        "clip_ratio/region_mean": _masked_mean(torch.maximum(low_clipped, high_clipped), ctx),
    }


def cispo(ctx: LossContext) -> Result:
    """TRL's CISPO: the ratio capped at ``epsilon_high`` (a cap, not 1 + it), detached, weighting ``-A log p``."""
    _, cap = _epsilons(ctx)
    ratio = _coefficient(ctx, ctx.log_probs - ctx.old_log_probs)
    weight = torch.clamp(ratio, max=cap).detach()
    per_token = -weight * ctx.advantages * ctx.log_probs
    clipped_share = ((ratio > cap) & (ctx.advantages > 0)).to(ctx.advantages.dtype)
    return ctx.aggregate(_finish(ctx, per_token)), {"cispo_clip_ratio": _masked_mean(clipped_share, ctx)}


def sapo(ctx: LossContext) -> Result:
    """TRL's SAPO: ``-4/tau sigmoid(tau (r - 1)) A``, ``tau`` by the advantage's sign."""
    adv = ctx.advantages
    tau = torch.where(adv > 0, ctx.options["sapo_temperature_pos"], ctx.options["sapo_temperature_neg"])
    ratio = _coefficient(ctx, ctx.log_probs - ctx.old_log_probs)
    gate = torch.sigmoid(tau * (ratio - 1)) * 4 / tau
    return ctx.aggregate(_finish(ctx, -gate * adv)), {}


_LOG_FLOOR = math.log(1e-8)
"""VESPO's floor of a log weight (TRL clamps log-ratios to [log 1e-8, 20])."""


def vespo(ctx: LossContext) -> Result:
    """TRL's VESPO: ``-phi(w) A log p``, ``phi(w) = exp(lam + k log w - lam w)`` of the sequence ratio ``w``, detached.

    ``w`` is the product of the token ratios (and of the rollout-correction weights, when given);
    ``k`` and ``lam`` are the ``vespo_*`` options of the sign of the sequence's advantage (read on its
    first token; non-negative: ``_pos``).
    """
    if ctx.options["importance_sampling_level"] != "token":
        raise LossOptionError(
            f"Loss {ctx.name!r} weighs whole sequences itself; leave importance_sampling_level at 'token'."
        )
    selected = _selected(ctx)
    with torch.no_grad():
        log_ratio = torch.clamp(ctx.log_probs - ctx.old_log_probs, -20.0, 20.0)
        sequence = torch.where(selected, log_ratio, 0.0).sum(-1, keepdim=True)
        if ctx.rollout_is_weights is not None:
            log_weights = torch.clamp(torch.log(ctx.rollout_is_weights), _LOG_FLOOR, 20.0)
            sequence = sequence + torch.where(selected, log_weights, 0.0).sum(-1, keepdim=True)
        log_w = torch.clamp(sequence, _LOG_FLOOR, 20.0)
        positive = ctx.advantages[:, :1] >= 0
        options = ctx.options
        k = torch.where(positive, options["vespo_k_pos"], options["vespo_k_neg"])
        lam = torch.where(positive, options["vespo_lambda_pos"], options["vespo_lambda_neg"]).clamp(min=1e-4)
        phi = torch.exp(lam + k * log_w - lam * torch.exp(log_w)).nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)
    per_token = -phi * ctx.advantages * ctx.log_probs
    return ctx.aggregate(_finish(ctx, per_token, weighted=False)), {"vespo/phi_seq_mean": _masked_mean(phi, ctx)}
