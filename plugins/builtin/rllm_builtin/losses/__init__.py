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
CLIP_C = Option(
    "clip_ratio_c",
    (float,),
    3.0,
    "dual clip: cap of the loss for negative advantages, as a ratio",
    minimum=1.0,
    above=True,
)
TRUNCATE_C = Option("clip_ratio_c", (float,), 3.0, "cap of the detached importance ratio", minimum=0.0)

LOSSES: dict[str, dict[str, Any]] = {
    "vanilla": {"options": [*CLIP, CLIP_C], "aliases": ["ppo", "regular", "dual_clip", "ppo_clip"]},
    "dppo_tv": {"options": [*CLIP, TRUNCATE_C]},
    "dppo_kl": {"options": [*CLIP, TRUNCATE_C]},
    "gspo": {"options": CLIP},
    "sapo": {
        "options": [
            Option("tau_pos", (float,), 1.0, "gate temperature for positive advantages", minimum=0.0, above=True),
            Option("tau_neg", (float,), 1.05, "gate temperature for negative advantages", minimum=0.0, above=True),
        ],
        "agg_modes": ["seq-mean-token-mean"],
    },
    "gpg": {"options": [], "needs_old_log_probs": False},
    "clip_cov": {
        "options": [
            *CLIP,
            Option(
                "clip_cov_ratio",
                (float,),
                0.0002,
                "share of tokens whose gradient is dropped",
                minimum=0.0,
                above=True,
                maximum=1.0,
            ),
            Option("clip_cov_lb", (float,), 1.0, "lower bound of the covariance of dropped tokens"),
            Option("clip_cov_ub", (float,), 5.0, "upper bound of the covariance of dropped tokens"),
        ],
        "additive": False,
    },
    "kl_cov": {
        "options": [
            Option(
                "kl_cov_ratio",
                (float,),
                0.0002,
                "share of tokens given the KL penalty",
                minimum=0.0,
                above=True,
                maximum=1.0,
            ),
            Option("ppo_kl_coef", (float,), 0.1, "weight of |log ratio| on those tokens", minimum=0.0),
        ],
        "additive": False,
    },
    "geo_mean": {"options": CLIP, "agg_modes": ["seq-mean-token-mean"], "aliases": ["gmpo"]},
    "dro": {
        "options": [
            Option(
                "dro_beta",
                (float,),
                None,
                "weight of the quadratic log-ratio penalty",
                minimum=0.0,
                above=True,
                required=True,
            )
        ]
    },
    "cispo": {"options": CLIP},
    "reinforce": {"options": [], "needs_old_log_probs": False},
    "importance_sampling": {"options": []},
    "cross_entropy": {"options": [], "needs_old_log_probs": False},
}
"""Each built-in loss (the function of that name in ``functions``) and the keywords of its registration."""


DESCRIPTIONS = {
    "vanilla": "PPO clip with dual clip (verl's vanilla)",
    "dppo_tv": "DPPO, total-variation trust region on token probabilities",
    "dppo_kl": "DPPO, binary-KL trust region on token probabilities",
    "gspo": "GSPO: PPO clip of the sequence-level (geometric-mean) ratio",
    "sapo": "SAPO: a smooth sigmoid gate on the ratio instead of a hard clip",
    "gpg": "GPG: plain policy gradient -A * log p",
    "clip_cov": "Clip-Cov: PPO clip, a random share of high-covariance tokens lose their gradient",
    "kl_cov": "KL-Cov: ratio loss plus |log ratio| on the highest-covariance tokens",
    "geo_mean": "GMPO: PPO clip of the geometric mean of a sequence's ratios",
    "dro": "DRO: -A * log p with a quadratic log-ratio penalty (dro_beta)",
    "cispo": "CISPO: clipped ratio as a constant weight on -A * log p",
    "reinforce": "REINFORCE: -A * log p (times rollout-correction weights)",
    "importance_sampling": "tinker's importance_sampling: -ratio * A, no clip",
    "cross_entropy": "supervised cross-entropy -log p on response tokens",
}
"""One line per loss for ``rllm losses`` (the functions' module is not imported to list them)."""


def register_losses(register: LossRegistrar) -> None:
    """Register every built-in loss lazily, by import path."""
    for name, declaration in LOSSES.items():
        register(name, f"{MODULE}:{name}", description=DESCRIPTIONS[name], **declaration)
