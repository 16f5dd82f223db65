"""Tinker's built-in losses, summed over tokens, computed by rllm's registered losses where the two coincide.

Tinker's losses (its docs, "Loss functions") are sums over every datum's target positions:
``cross_entropy`` is ``-sum(weights * log p)``; ``importance_sampling`` ``-sum(ratio * A)``;
``ppo`` ``-sum(min(ratio * A, clip(ratio, low, high) * A))``; ``cispo``
``-sum(detach(clip(ratio, low, high)) * A * log p)``; ``dro``
``-sum(A * log p - beta / 2 * (log p - log q)^2)``, with ``ratio = exp(log p - log q)`` against
the sampler's log-probs ``q``. rllm's ``cross_entropy``, ``importance_sampling``, ``vanilla``
(PPO, its dual clip moved out of reach), ``cispo`` and ``dro`` are these per-token terms, so they
are called with ``token-sum`` aggregation. rllm clamps a log-ratio to +-20 before ``exp``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from rllm.losses import LossContext, get_loss

NO_DUAL_CLIP = 1e30
"""``clip_ratio_c`` for rllm's PPO: a cap no loss reaches, so its objective is Tinker's plain clipped one."""


@dataclass(frozen=True)
class TinkerLoss:
    rllm_name: str
    inputs: tuple[str, ...]
    """The ``loss_fn_inputs`` besides ``target_tokens``; ``weights`` is optional for ``cross_entropy``."""
    config: dict[str, float]
    """The ``loss_fn_config`` keys it takes and their defaults (Tinker's)."""


RL_INPUTS = ("logprobs", "advantages")
CLIP = {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}
LOSSES = {
    "cross_entropy": TinkerLoss("cross_entropy", ("weights",), {}),
    "importance_sampling": TinkerLoss("importance_sampling", RL_INPUTS, {}),
    "ppo": TinkerLoss("vanilla", RL_INPUTS, CLIP),
    "cispo": TinkerLoss("cispo", RL_INPUTS, CLIP),
    "dro": TinkerLoss("dro", RL_INPUTS, {"beta": float("nan")}),
}
"""What the server computes, by Tinker's name (``gspo``, ``stable_reinforce`` and ``custom`` it refuses)."""


def check_config(name: str, config: dict[str, Any]) -> dict[str, float]:
    """The loss's settings from ``loss_fn_config`` over its defaults; a key it does not take raises ``KeyError``
    (the caller names the field), a bad value ``ValueError``."""
    loss = LOSSES[name]
    settings = dict(loss.config)
    for key, value in config.items():
        if key not in settings:
            taken = ", ".join(settings) or "none"
            raise KeyError(f"{key!r} is not a setting of {name} (it takes: {taken})")
        if isinstance(value, (str, bool)):
            raise ValueError(f"{key} must be a number, got {value!r}")
        settings[key] = float(value)
    if "clip_low_threshold" in settings:
        low, high = settings["clip_low_threshold"], settings["clip_high_threshold"]
        if not 0 <= low <= 1 <= high:
            raise ValueError(
                f"clip thresholds must satisfy 0 <= clip_low_threshold <= 1 <= clip_high_threshold, got {low}, {high}"
            )
    if name == "dro" and not settings["beta"] > 0:
        raise ValueError("dro needs loss_fn_config beta, a positive number")
    return settings


def tinker_loss(
    name: str, settings: dict[str, float], log_probs: torch.Tensor, inputs: dict[str, torch.Tensor], mask: torch.Tensor
) -> tuple[torch.Tensor, dict[str, float]]:
    """The summed loss of a padded ``(datums, positions)`` batch; ``mask`` marks the real positions."""
    loss = LOSSES[name]
    options: dict[str, Any] = {}
    if name == "cross_entropy":
        weights = inputs.get("weights", torch.ones_like(log_probs))
        log_probs, mask = log_probs * weights, mask & (weights != 0)
    if "clip_low_threshold" in settings:
        low, high = 1 - settings["clip_low_threshold"], settings["clip_high_threshold"] - 1
        options = {"clip_ratio": high, "clip_ratio_low": low, "clip_ratio_high": high, "clip_ratio_c": NO_DUAL_CLIP}
    if name == "dro":
        options = {"dro_beta": settings["beta"]}
    ctx = LossContext(
        log_probs=log_probs,
        old_log_probs=inputs.get("logprobs"),
        advantages=inputs.get("advantages"),
        response_mask=mask,
        options=options,
        agg_mode="token-sum",
        name=loss.rllm_name,
    )
    value, metrics = get_loss(loss.rllm_name)(ctx)
    return value, metrics
