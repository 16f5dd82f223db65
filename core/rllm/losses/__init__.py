"""Policy losses by name: the context a loss receives, aggregation, KL penalties and controllers, KL in the reward.

A loss is ``fn(ctx: LossContext) -> (scalar_tensor, metrics)``, registered by a plugin's
``rllm_register_losses`` hook (see :mod:`rllm.plugins.hookspecs`; its words, the aggregation
modes, KL kinds and TIS modes, are :mod:`rllm.contract.names`'s). This module imports no
torch: the functions that compute import it when called, and a loss's module is imported the
first time the loss is used.
"""

from __future__ import annotations

from rllm.contract.names import KL_KINDS, LOSS_AGG_MODES, TIS_MODES
from rllm.losses.aggregation import aggregate, check_agg_mode, prompt_counts
from rllm.losses.compute import compute_policy_loss
from rllm.losses.context import LossContext, LossFn
from rllm.losses.correction import off_policy_sequence_mask, parse_rejection, rejection_mask, truncated_is_weights
from rllm.losses.kl import (
    AdaptiveKLController,
    FixedKLController,
    check_kl_coef,
    check_kl_kind,
    kl_controller,
    kl_penalty,
)
from rllm.losses.kl_reward import KLInReward, batch_mean_kl
from rllm.losses.registry import get_loss, loss_entry, loss_names, resolve_loss_options
from rllm.losses.settings import LossSettings

__all__ = [
    "KL_KINDS",
    "LOSS_AGG_MODES",
    "TIS_MODES",
    "AdaptiveKLController",
    "FixedKLController",
    "KLInReward",
    "LossContext",
    "LossFn",
    "LossSettings",
    "aggregate",
    "batch_mean_kl",
    "check_agg_mode",
    "check_kl_coef",
    "check_kl_kind",
    "compute_policy_loss",
    "get_loss",
    "kl_controller",
    "kl_penalty",
    "loss_entry",
    "loss_names",
    "off_policy_sequence_mask",
    "parse_rejection",
    "prompt_counts",
    "rejection_mask",
    "resolve_loss_options",
    "truncated_is_weights",
]
