"""Policy losses on token tensors, until rllm's loss registry provides them.

Each loss maps ``(log_probs, old_log_probs, advantages, mask)`` (shape ``(rows, tokens)``) to
per-token loss terms and a clipped-token mask; :func:`policy_loss` aggregates them with the
configured ``loss_agg_mode``. Only :func:`policy_loss` is called by the backend, so switching to
the registry changes this module alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

LOSS_NAMES = ("ppo", "vanilla", "importance_sampling", "cispo", "reinforce", "gspo")
AGG_MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean")
KL_KINDS = ("k1", "k2", "k3", "low_var_kl")


@dataclass(frozen=True)
class Clip:
    low: float
    high: float


Terms = tuple[torch.Tensor, torch.Tensor]
"""Per-token loss and per-token 'clipped' flags."""


def _ppo(logp: torch.Tensor, old: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor, clip: Clip) -> Terms:
    ratio = torch.exp((logp - old).clamp(-20, 20))
    plain, clipped = -ratio * adv, -ratio.clamp(1 - clip.low, 1 + clip.high) * adv
    return torch.maximum(plain, clipped), clipped > plain


def _importance_sampling(
    logp: torch.Tensor, old: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor, clip: Clip
) -> Terms:
    return -torch.exp((logp - old).clamp(-20, 20)) * adv, torch.zeros_like(mask, dtype=torch.bool)


def _cispo(logp: torch.Tensor, old: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor, clip: Clip) -> Terms:
    ratio = torch.exp((logp - old).clamp(-20, 20)).detach()
    return -ratio.clamp(max=1 + clip.high) * adv * logp, ratio > 1 + clip.high


def _reinforce(logp: torch.Tensor, old: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor, clip: Clip) -> Terms:
    return -adv * logp, torch.zeros_like(mask, dtype=torch.bool)


def _gspo(logp: torch.Tensor, old: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor, clip: Clip) -> Terms:
    """Sequence-level ratio (the geometric mean of the token ratios), with each token's own gradient path."""
    lengths = mask.sum(-1, keepdim=True).clamp(min=1)
    seq_log_ratio = ((logp - old) * mask).sum(-1, keepdim=True) / lengths
    log_ratio = logp - logp.detach() + seq_log_ratio.detach()
    return _ppo(log_ratio, torch.zeros_like(log_ratio), adv, mask, clip)


LOSSES: dict[str, Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, Clip], Terms]] = {
    "ppo": _ppo,
    "vanilla": _ppo,
    "importance_sampling": _importance_sampling,
    "cispo": _cispo,
    "reinforce": _reinforce,
    "gspo": _gspo,
}


def aggregate(
    per_token: torch.Tensor, mask: torch.Tensor, mode: str, total_tokens: float, total_rows: float
) -> torch.Tensor:
    """Reduce per-token values to the mini-batch's share of the loss; totals are the mini-batch's, so the
    micro-batches of one mini-batch sum to the loss of the whole."""
    if mode == "token-mean":
        return (per_token * mask).sum() / max(total_tokens, 1.0)
    per_row = (per_token * mask).sum(-1)
    if mode == "seq-mean-token-mean":
        per_row = per_row / mask.sum(-1).clamp(min=1)
    return per_row.sum() / max(total_rows, 1.0)


def kl_penalty(logp: torch.Tensor, ref: torch.Tensor, kind: str) -> torch.Tensor:
    """Per-token KL estimate to the reference policy: k1 (log-ratio), k2 (half squared), k3 / low_var_kl."""
    log_ratio = logp - ref
    if kind == "k1":
        return log_ratio
    if kind == "k2":
        return 0.5 * log_ratio.square()
    back = (-log_ratio).clamp(-20, 20)
    return (torch.exp(back) - back - 1).clamp(-10, 10)


def policy_loss(
    name: str,
    logp: torch.Tensor,
    old: torch.Tensor,
    adv: torch.Tensor,
    mask: torch.Tensor,
    clip: Clip,
) -> Terms:
    """Per-token loss terms of the named loss (see :data:`LOSSES`)."""
    return LOSSES[name](logp, old, adv, mask, clip)
