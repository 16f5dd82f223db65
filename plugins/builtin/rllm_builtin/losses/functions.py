"""The built-in policy losses, in torch: verl's family, REINFORCE, and tinker's names.

Each is ``fn(ctx) -> (loss, metrics)`` (see :mod:`rllm.losses`); verl's metric names without
its ``actor/`` prefix. This module is imported only when one of these losses is used.
"""

from __future__ import annotations

from typing import Any

import torch

from rllm.errors import LossOptionError
from rllm.losses import LossContext

Result = tuple[torch.Tensor, dict[str, float]]


def _masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.where(mask.bool(), values, 0.0).sum() / (mask.sum() + 1e-8)


def _clip_range(options: dict[str, Any]) -> tuple[float, float]:
    """(low, high): ``clip_ratio_low``/``clip_ratio_high``, each defaulting to ``clip_ratio``."""
    low, high = options.get("clip_ratio_low"), options.get("clip_ratio_high")
    base = options["clip_ratio"]
    return (base if low is None else low), (base if high is None else high)


def _log_ratio(ctx: LossContext, clamp: bool = True) -> torch.Tensor:
    diff = ctx.log_probs - ctx.old_log_probs
    return torch.clamp(diff, min=-20.0, max=20.0) if clamp else diff


def _weighted(pg_losses: torch.Tensor, ctx: LossContext) -> torch.Tensor:
    """Per-token losses times the rollout-correction weights, when the run has them."""
    return pg_losses if ctx.rollout_is_weights is None else pg_losses * ctx.rollout_is_weights


def _metrics(**values: torch.Tensor | float) -> dict[str, float]:
    return {k: float(v.detach().item()) if isinstance(v, torch.Tensor) else float(v) for k, v in values.items()}


def vanilla(ctx: LossContext) -> Result:
    """PPO's clipped objective, with dual clip: for negative advantages the loss is capped at ``-A * clip_ratio_c``."""
    low, high = _clip_range(ctx.options)
    clip_c = ctx.options["clip_ratio_c"]
    log_ratio = _log_ratio(ctx)
    ratio, adv, mask = torch.exp(log_ratio), ctx.advantages, ctx.response_mask
    plain, clipped = -adv * ratio, -adv * torch.clamp(ratio, 1 - low, 1 + high)
    pessimistic = torch.maximum(plain, clipped)
    floor = -adv * clip_c
    negative = adv < 0
    per_token = torch.where(negative, torch.minimum(floor, pessimistic), pessimistic)
    loss = ctx.aggregate(_weighted(per_token, ctx))
    return loss, _metrics(
        pg_clipfrac=_masked_mean((clipped > plain).float(), mask),
        ppo_kl=_masked_mean(-log_ratio, mask),
        pg_clipfrac_lower=_masked_mean(((pessimistic > floor) & negative).float(), mask),
    )


def _dppo(ctx: LossContext, kind: str) -> Result:
    low, high = _clip_range(ctx.options)
    clip_c = ctx.options["clip_ratio_c"]
    log_ratio = _log_ratio(ctx)
    ratio, adv, mask, logp = torch.exp(log_ratio), ctx.advantages, ctx.response_mask, ctx.log_probs
    truncated = torch.clamp(ratio, max=clip_c).detach()
    prob, old_prob = torch.exp(logp), torch.exp(ctx.old_log_probs)
    if kind == "tv":
        keep_pos, keep_neg = (prob - old_prob) <= high, (prob - old_prob) >= -low
    else:
        divergence = old_prob * (ctx.old_log_probs - logp) + (1 - old_prob) * torch.log(
            (1.0 - old_prob + 1e-8) / (1.0 - prob + 1e-8)
        )
        keep_pos = (divergence <= high) | (prob <= old_prob)
        keep_neg = (divergence <= low) | (prob >= old_prob)
    keep = torch.where(adv > 0, keep_pos, keep_neg).detach().float()
    loss = ctx.aggregate(_weighted(-adv * truncated * logp * keep, ctx))
    return loss, _metrics(
        pg_clipfrac=_masked_mean(1.0 - keep, mask),
        ppo_kl=_masked_mean(-log_ratio, mask),
        pg_clipfrac_lower=_masked_mean((ratio > clip_c).float() * keep, mask),
    )


def dppo_tv(ctx: LossContext) -> Result:
    """DPPO with a total-variation trust region: tokens whose probability moved past the clip lose their gradient."""
    return _dppo(ctx, "tv")


def dppo_kl(ctx: LossContext) -> Result:
    """DPPO with a binary-KL trust region on each token's probability."""
    return _dppo(ctx, "kl")


def gspo(ctx: LossContext) -> Result:
    """GSPO: PPO clipping of the sequence-level ratio (geometric mean of token ratios), token gradients kept."""
    low, high = _clip_range(ctx.options)
    mask, adv, logp = ctx.response_mask, ctx.advantages, ctx.log_probs
    diff = logp - ctx.old_log_probs
    lengths = mask.sum(dim=-1).clamp(min=1)
    sequence = (diff * mask).sum(dim=-1) / lengths
    log_ratio = torch.clamp(logp - logp.detach() + sequence.detach().unsqueeze(-1), max=10.0)
    ratio = torch.exp(log_ratio)
    plain, clipped = -adv * ratio, -adv * torch.clamp(ratio, 1 - low, 1 + high)
    loss = ctx.aggregate(_weighted(torch.maximum(plain, clipped), ctx))
    return loss, _metrics(
        pg_clipfrac=_masked_mean((clipped > plain).float(), mask),
        ppo_kl=_masked_mean(-diff, mask),
        pg_clipfrac_lower=0.0,
    )


def sapo(ctx: LossContext) -> Result:
    """SAPO: a smooth sigmoid gate on the ratio instead of a hard clip (temperatures ``tau_pos``/``tau_neg``)."""
    adv = ctx.advantages
    tau = torch.where(
        adv > 0,
        torch.as_tensor(ctx.options["tau_pos"], dtype=adv.dtype),
        torch.as_tensor(ctx.options["tau_neg"], dtype=adv.dtype),
    )
    log_ratio = _log_ratio(ctx)
    gate = torch.sigmoid(tau * (torch.exp(log_ratio) - 1.0)) * (4.0 / tau)
    loss = ctx.aggregate(_weighted(-gate * adv, ctx))
    return loss, _metrics(pg_clipfrac=0.0, ppo_kl=_masked_mean(-log_ratio, ctx.response_mask), pg_clipfrac_lower=0.0)


def gpg(ctx: LossContext) -> Result:
    """GPG: the plain policy gradient ``-A * log p`` (no ratio, no clip)."""
    return ctx.aggregate(_weighted(-ctx.log_probs * ctx.advantages, ctx)), {}


def reinforce(ctx: LossContext) -> Result:
    """REINFORCE: ``-A * log p``, times the rollout-correction weights; reports the KL to the rollout policy."""
    loss = ctx.aggregate(_weighted(-ctx.advantages * ctx.log_probs, ctx))
    behaviour = ctx.rollout_log_probs if ctx.rollout_log_probs is not None else ctx.old_log_probs
    return loss, _metrics(ppo_kl=_masked_mean(behaviour - ctx.log_probs, ctx.response_mask))


def importance_sampling(ctx: LossContext) -> Result:
    """tinker's ``importance_sampling``: ``-ratio * A`` with the ratio to the sampling policy, no clip."""
    log_ratio = _log_ratio(ctx)
    loss = ctx.aggregate(_weighted(-torch.exp(log_ratio) * ctx.advantages, ctx))
    return loss, _metrics(ppo_kl=_masked_mean(-log_ratio, ctx.response_mask))


def cross_entropy(ctx: LossContext) -> Result:
    """Supervised cross-entropy ``-log p`` on the response tokens (tinker's ``cross_entropy``); advantages unused."""
    return ctx.aggregate(-ctx.log_probs), {}


def clip_cov(ctx: LossContext) -> Result:
    """Clip-Cov: PPO clip, plus a random share of tokens with high advantage-logp covariance lose their gradient.

    The tokens are drawn with torch's global generator (``torch.randperm``), as verl does.
    """
    options = ctx.options
    low, high = _clip_range(options)
    ratio_share, lower, upper = options["clip_cov_ratio"], options["clip_cov_lb"], options["clip_cov_ub"]
    mask, adv, logp = ctx.response_mask, ctx.advantages, ctx.log_probs
    diff = logp - ctx.old_log_probs
    ratio = torch.exp(diff)
    plain, clipped = -adv * ratio, -adv * torch.clamp(ratio, 1 - low, 1 + high)
    valid = mask > 0
    covariance = (adv - _masked_mean(adv, mask)) * (logp - _masked_mean(logp.detach(), mask))
    covariance = covariance.masked_fill(~valid | ((clipped > plain) & valid), -torch.inf)
    count = max(int(ratio_share * mask.sum().item()), 1)
    candidates = torch.nonzero((covariance < upper) & (covariance > lower) & valid)
    if len(candidates) > 0:
        candidates = candidates[torch.randperm(len(candidates))[: min(count, len(candidates))]]
    keep = torch.ones_like(adv)
    keep[candidates[:, 0], candidates[:, 1]] = 0
    loss = ctx.aggregate(_weighted(torch.maximum(plain, clipped) * keep, ctx))
    return loss, _metrics(pg_clipfrac=_masked_mean((keep == 0).float(), mask), ppo_kl=_masked_mean(-diff, mask))


def kl_cov(ctx: LossContext) -> Result:
    """KL-Cov: the unclipped ratio loss, plus ``ppo_kl_coef * |log ratio|`` on the tokens of highest covariance."""
    share, coef = ctx.options["kl_cov_ratio"], ctx.options["ppo_kl_coef"]
    mask, adv, logp = ctx.response_mask, ctx.advantages, ctx.log_probs
    diff = logp - ctx.old_log_probs
    ratio = torch.exp(diff)
    per_token = -adv * ratio
    valid = (mask > 0).reshape(-1)
    flat_index = torch.nonzero(valid, as_tuple=True)[0]
    valid_adv = adv.reshape(-1)[valid].detach()
    valid_logp = logp.reshape(-1)[valid].detach()
    if len(valid_adv):
        covariance = (valid_adv - valid_adv.mean()) * (valid_logp - valid_logp.mean())
        top = flat_index[torch.topk(covariance, max(1, int(len(covariance) * share)), largest=True).indices]
        penalised = torch.zeros(per_token.numel(), dtype=torch.bool)
        penalised[top] = True
        per_token = torch.where(penalised.reshape(per_token.shape), per_token + coef * diff.abs(), per_token)
    loss = ctx.aggregate(_weighted(per_token, ctx))
    return loss, _metrics(ppo_kl=_masked_mean(diff.abs(), mask))


def geo_mean(ctx: LossContext) -> Result:
    """GMPO: PPO clipping applied to the geometric mean of a sequence's token ratios; one loss per sequence.

    Sequences are averaged over the whole batch (``ctx.sequence_mean``), so micro-batches add
    up; it is verl's ``seq-mean-token-mean``, the only mode it declares.
    """
    low, high = _clip_range(ctx.options)
    mask, adv = ctx.response_mask, ctx.advantages
    diff = ctx.log_probs - ctx.old_log_probs
    sign = torch.sign(adv)
    bounded = torch.clamp(diff, -low, high)
    pessimistic = sign * torch.minimum(sign * diff, sign * bounded)
    lengths = mask.sum(dim=-1) + 1e-8
    ratio = torch.exp(torch.where(mask.bool(), pessimistic, 0.0).sum(dim=-1) / lengths)
    advantage = torch.where(mask.bool(), adv, 0.0).sum(dim=-1) / lengths
    per_sequence = -advantage * ratio
    if ctx.rollout_is_weights is not None:
        log_weights = torch.where(mask.bool(), torch.log(ctx.rollout_is_weights + 1e-10), 0.0)
        per_sequence = per_sequence * torch.exp(log_weights.sum(dim=-1) / lengths)
    moved = diff != bounded
    return ctx.sequence_mean(per_sequence), _metrics(
        pg_clipfrac=_masked_mean((moved & (adv > 0)).float(), mask),
        ppo_kl=_masked_mean(-diff, mask),
        pg_clipfrac_lower=_masked_mean((moved & (adv < 0)).float(), mask),
    )


def dro(ctx: LossContext) -> Result:
    """DRO: ``-(A * log p - beta/2 * (log ratio)^2)``, a quadratic pull towards the old policy."""
    beta = ctx.options["dro_beta"]
    if beta is None or not beta > 0:
        raise LossOptionError(f"Loss {ctx.name!r} needs option 'dro_beta', a positive number; got {beta!r}.")
    diff = ctx.log_probs - ctx.old_log_probs
    loss = ctx.aggregate(_weighted(-(ctx.log_probs * ctx.advantages - 0.5 * beta * diff.square()), ctx))
    return loss, _metrics(ppo_kl=_masked_mean(-diff, ctx.response_mask))


def cispo(ctx: LossContext) -> Result:
    """CISPO: the clipped ratio as a constant weight on ``-A * log p``, so no token loses its gradient."""
    low, high = _clip_range(ctx.options)
    log_ratio = _log_ratio(ctx)
    ratio = torch.exp(log_ratio)
    weight = torch.clamp(ratio, 1 - low, 1 + high)
    loss = ctx.aggregate(_weighted(-weight.detach() * ctx.advantages * ctx.log_probs, ctx))
    mask = ctx.response_mask
    return loss, _metrics(
        pg_clipfrac=_masked_mean((ratio != weight).float(), mask),
        ppo_kl=_masked_mean(-log_ratio, mask),
        pg_clipfrac_lower=0.0,
    )
