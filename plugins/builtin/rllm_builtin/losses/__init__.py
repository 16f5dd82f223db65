"""The built-in policy losses: their names, aliases and declared options (no torch here).

The functions live in :mod:`rllm_builtin.losses.functions` and are imported on first use.
"""

from __future__ import annotations

from typing import Any

from rllm.plugins import LossRegistrar
from rllm.toolkit import Option

MODULE = "rllm_builtin.losses.functions"

CLIP = [
    Option("clip_ratio", (float,), 0.2, "PPO clip range (both sides unless low/high are given)", minimum=0.0),
    Option("clip_ratio_low", (float,), None, "lower clip range; null: clip_ratio", minimum=0.0),
    Option("clip_ratio_high", (float,), None, "upper clip range; null: clip_ratio", minimum=0.0),
]
CLIP_C = Option("clip_ratio_c", (float,), 3.0, "dual clip: cap of the loss for negative advantages, as a ratio")
TRUNCATE_C = Option("clip_ratio_c", (float,), 3.0, "cap of the detached importance ratio", minimum=0.0)

LOSSES: dict[str, dict[str, Any]] = {
    "vanilla": {"options": [*CLIP, CLIP_C], "aliases": ["ppo", "regular", "dual_clip", "ppo_clip"]},
    "dppo_tv": {"options": [*CLIP, TRUNCATE_C]},
    "dppo_kl": {"options": [*CLIP, TRUNCATE_C]},
    "gspo": {"options": CLIP},
    "sapo": {
        "options": [
            Option("tau_pos", (float,), 1.0, "gate temperature for positive advantages", minimum=0.0),
            Option("tau_neg", (float,), 1.05, "gate temperature for negative advantages", minimum=0.0),
        ],
        "agg_modes": ["seq-mean-token-mean"],
    },
    "gpg": {"options": [], "needs_old_log_probs": False},
    "clip_cov": {
        "options": [
            *CLIP,
            Option("clip_cov_ratio", (float,), 0.0002, "share of tokens whose gradient is dropped", minimum=0.0),
            Option("clip_cov_lb", (float,), 1.0, "lower bound of the covariance of dropped tokens"),
            Option("clip_cov_ub", (float,), 5.0, "upper bound of the covariance of dropped tokens"),
        ]
    },
    "kl_cov": {
        "options": [
            Option("kl_cov_ratio", (float,), 0.0002, "share of tokens given the KL penalty", minimum=0.0),
            Option("ppo_kl_coef", (float,), 0.1, "weight of |log ratio| on those tokens", minimum=0.0),
        ]
    },
    "geo_mean": {"options": CLIP, "agg_modes": ["seq-mean-token-mean"], "aliases": ["gmpo"]},
    "dro": {"options": [Option("dro_beta", (float,), None, "weight of the quadratic log-ratio penalty (required)")]},
    "cispo": {"options": CLIP},
    "reinforce": {"options": [], "needs_old_log_probs": False},
    "importance_sampling": {"options": []},
    "cross_entropy": {"options": [], "needs_old_log_probs": False},
}
"""Each built-in loss (the function of that name in ``functions``) and the keywords of its registration."""


def register_losses(register: LossRegistrar) -> None:
    """Register every built-in loss lazily, by import path."""
    for name, declaration in LOSSES.items():
        register(name, f"{MODULE}:{name}", **declaration)
