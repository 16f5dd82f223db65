"""The built-in advantage estimators, as batch-style kernels over flat arrays."""

from rllm_builtin.estimators.baseline_variants import gpg, maxrl, opo, remax
from rllm_builtin.estimators.composition import mix
from rllm_builtin.estimators.distill import distill
from rllm_builtin.estimators.gigpo import ANCHOR_FIELD, gigpo
from rllm_builtin.estimators.gigpo import HOOK_NAME as GIGPO_HOOK
from rllm_builtin.estimators.gigpo import MODES as GIGPO_MODES
from rllm_builtin.estimators.group_baselines import (
    dr_grpo,
    grpo,
    grpo_batch_std,
    prpo,
    reinforce,
    reinforce_plus_plus_baseline,
    rloo,
)
from rllm_builtin.estimators.grpo_passk import grpo_passk
from rllm_builtin.estimators.multi_reward import gdpo
from rllm_builtin.estimators.pkpo import pkpo
from rllm_builtin.estimators.returns import gae, reinforce_plus_plus
from rllm_builtin.estimators.running import ema_baseline
from rllm_builtin.estimators.token_baselines import optimal_token_baseline, tir_optimal_token_baseline
from rllm_builtin.estimators.turns import turn_grpo

__all__ = [
    "ANCHOR_FIELD",
    "GIGPO_HOOK",
    "GIGPO_MODES",
    "distill",
    "dr_grpo",
    "ema_baseline",
    "gae",
    "gdpo",
    "gigpo",
    "gpg",
    "grpo",
    "grpo_batch_std",
    "grpo_passk",
    "maxrl",
    "mix",
    "opo",
    "optimal_token_baseline",
    "pkpo",
    "prpo",
    "reinforce",
    "reinforce_plus_plus",
    "reinforce_plus_plus_baseline",
    "remax",
    "rloo",
    "tir_optimal_token_baseline",
    "turn_grpo",
]
