"""The ``trl`` plugin's registrations in rllm: TRL's loss types as ``trl.<loss_type>`` (no torch, no TRL here).

The functions are in :mod:`rllm_trl.losses`, imported the first time such a loss runs. They need
torch only, so ``rllm.algorithm.loss_fn=trl.dapo`` works in any torch backend, TRL installed or not.
"""

from __future__ import annotations

import rllm
from rllm.plugins import LossRegistrar
from rllm.toolkit import Option

PREFIX = "trl."
MODULE = "rllm_trl.losses"

EPSILON = Option("epsilon", (float,), 0.2, "clip range below 1 (TRL's epsilon)", minimum=0.0)
EPSILON_HIGH = Option(
    "epsilon_high", (float,), None, "clip range above 1; trl.cispo: the cap of the ratio (null: epsilon)", minimum=0.0
)
DELTA = Option(
    "delta", (float,), None, "cap of the unclipped ratio (two-sided clip; null: none)", minimum=0.0, above=True
)
LEVEL = Option(
    "importance_sampling_level",
    (str,),
    "token",
    "one ratio per token, or per sequence (exp of its mean log-ratio)",
    choices=("token", "sequence"),
)
TOP_ENTROPY = Option(
    "top_entropy_quantile",
    (float,),
    1.0,
    "share of response tokens, by highest entropy, that keep their policy-gradient term (1: all)",
    minimum=0.0,
    maximum=1.0,
)
SHARED = [LEVEL, TOP_ENTROPY]
CLIP = [EPSILON, EPSILON_HIGH, DELTA, *SHARED]


def _positive(name: str, default: float, doc: str) -> Option:
    return Option(name, (float,), default, doc, minimum=0.0, above=True)


LOSSES: dict[str, tuple[str, str, list[Option], str]] = {
    "grpo": ("clipped", "seq-mean-token-mean", CLIP, "per-sequence token mean"),
    "bnpo": ("clipped", "token-mean", CLIP, "token mean of the micro-batch"),
    "dr_grpo": ("clipped", "seq-mean-token-sum-norm", CLIP, "sum / max length"),
    "dapo": ("clipped", "token-mean", CLIP, "token mean of the batch"),
    "luspo": ("clipped", "seq-mean-token-sum", CLIP, "per-sequence token sum"),
    "cispo": ("cispo", "token-mean", [EPSILON, EPSILON_HIGH, *SHARED], "capped ratio"),
    "sapo": (
        "sapo",
        "seq-mean-token-mean",
        [
            _positive("sapo_temperature_pos", 1.0, "gate temperature for positive advantages"),
            _positive("sapo_temperature_neg", 1.05, "gate temperature for other advantages"),
            *SHARED,
        ],
        "sigmoid gate",
    ),
    "vespo": (
        "vespo",
        "token-mean",
        [
            Option("vespo_k_pos", (float,), 2.0, "power of w for non-negative advantages"),
            Option("vespo_lambda_pos", (float,), 3.0, "decay of w for non-negative advantages"),
            Option("vespo_k_neg", (float,), 3.0, "power of w for negative advantages"),
            Option("vespo_lambda_neg", (float,), 2.0, "decay of w for negative advantages"),
            *SHARED,
        ],
        "gamma weight of the sequence ratio",
    ),
}
"""TRL 1.16's ``loss_type`` values: (function, aggregation mode, options, what it does)."""


@rllm.hookimpl
def rllm_register_losses(register: LossRegistrar) -> None:
    for loss_type, (function, mode, options, what) in LOSSES.items():
        register(
            PREFIX + loss_type,
            f"{MODULE}:{function}",
            options=options,
            agg_modes=[mode],
            description=f"TRL's loss_type={loss_type!r}: {what}, {mode}",
        )
