"""The domain's word lists: each is written here once and every layer reads it from here.

A config key's ``choices``, a ``Literal`` type, a registration check and the docs all name the
same tuple, so adding a word is one edit (tests/architecture/test_vocabularies.py ties the
copies that cannot import it, such as ``Literal`` types, to these tuples).
"""

from __future__ import annotations

from enum import Enum
from typing import Literal

EstimatorStyle = Literal["grouped", "batch"]
ESTIMATOR_STYLES: tuple[str, ...] = ("grouped", "batch")
"""How a registered estimator is called: with a list of group arrays, or with one ``AdvantageBatch``."""


class rLLMAdvantageEstimator(str, Enum):
    """Names of the estimators every backend understands.

    Unknown values map to ``OTHER``; a custom estimator is therefore named by its plain
    string in :class:`AlgorithmConfig` (``from_config`` keeps that string).
    """

    GRPO = "grpo"
    REINFORCE = "reinforce"
    REINFORCE_PLUS_PLUS_BASELINE = "reinforce_plus_plus_baseline"
    PRPO = "prpo"
    RLOO = "rloo"
    OTHER = "other"

    @classmethod
    def _missing_(cls, value: object) -> rLLMAdvantageEstimator:
        return cls.OTHER


RLLM_ESTIMATORS: tuple[str, ...] = tuple(
    e.value for e in rLLMAdvantageEstimator if e is not rLLMAdvantageEstimator.OTHER
)
"""rLLM's own estimators. User code re-registering one of these is refused without ``replace=True``; this
project's other built-ins (``opo``, ``pkpo``, ...) are names rLLM programs define themselves (rLLM's OPO
example), so taking one of those replaces it with a warning."""


KERNEL_NAMES = ("group_centre", "sorted_runs", "run_starts")
"""The toolkit primitives a plugin may provide a faster implementation of (``rllm_register_kernels``)."""

NonFinitePolicy = Literal["error", "zero", "exclude"]
NONFINITE_POLICIES: tuple[str, ...] = ("error", "zero", "exclude")
"""What a non-finite (unscorable) reward does: an error naming the group, a zero group, or left out."""

BACKEND_METHODS: dict[str, bool] = {
    "init_rollout_engine": False,
    "validate_config": False,
    "get_dataloader": False,
    "builtin_task": False,
    "shutdown": False,
    "prepare_checkpoint": False,
    "save_checkpoint": False,
    "load_checkpoint": False,
    "generate_episodes": True,
    "transform_to_backend_batch": False,
    "process_backend_batch": True,
    "compute_advantages": True,
    "update_policy": True,
    "on_policy_updated": True,
    "on_train_start": True,
    "on_train_end": True,
    "on_epoch_start": True,
    "on_epoch_end": True,
    "on_batch_start": True,
    "on_batch_end": True,
    "on_validation_start": True,
    "on_validation_end": True,
}
"""Methods of :class:`rllm.trainer.backend_protocol.BackendProtocol` the trainer calls; True: ``async``."""

BACKEND_ABSTRACT_METHODS = ("init_rollout_engine", "get_dataloader", "transform_to_backend_batch", "update_policy")
"""Protocol methods without a default: a backend subclassing the protocol must override them."""

LOSS_AGG_MODES = (
    "token-mean",
    "token-sum",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
    "prompt-mean",
)
"""How per-token losses become one scalar (``LossContext.aggregate``): verl's five and SkyRL's ``prompt_mean``."""

KL_KINDS = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")
"""verl's KL estimators (k1, abs, k2, k3 and their long names); each also with a trailing ``+``."""

KL_KIND_CHOICES = tuple(kind + suffix for suffix in ("", "+") for kind in KL_KINDS)
"""Every value ``kl_loss_type`` and ``kl_penalty`` accept: the kinds, bare and with ``+``."""

KlController = Literal["fixed", "adaptive"]
KL_CONTROLLERS: tuple[str, ...] = ("fixed", "adaptive")
"""How the KL-in-reward coefficient moves (verl's ``kl_ctrl.type``): never, or towards a target KL."""

TisMode = Literal["token", "sequence"]
TIS_MODES: tuple[str, ...] = ("token", "sequence")
"""Levels of truncated importance sampling (``rllm.algorithm.rollout_correction.tis_mode``)."""

REFUSED_HOOKIMPL_OPTIONS = ("wrapper", "hookwrapper", "tryfirst", "trylast")
"""pluggy hookimpl options that mean nothing for registration hooks; a plugin using one is refused."""

LrSchedule = Literal["linear", "cosine", "constant"]
LR_SCHEDULES: tuple[str, ...] = ("linear", "cosine", "constant")
"""Learning-rate schedules after the warm-up (``rllm.algorithm.lr_schedule``)."""


class TerminationReason(str, Enum):
    """Why an episode ended (``rllm.types.TerminationReason``; ``rllm.compact_filtering.mask_<reason>`` names each)."""

    MAX_PROMPT_LENGTH_EXCEEDED = "max_prompt_length_exceeded"
    MAX_RESPONSE_LENGTH_EXCEEDED = "max_response_length_exceeded"
    ENV_DONE = "env_done"
    MAX_TURNS_EXCEEDED = "max_turns_exceeded"
    TIMEOUT = "timeout"
    UNKNOWN = "unknown"
    ERROR = "error"


REJECTION_MODES: tuple[str, ...] = (
    "token_k1",
    "token_k2",
    "token_k3",
    "seq_sum_k1",
    "seq_sum_k2",
    "seq_sum_k3",
    "seq_mean_k1",
    "seq_mean_k2",
    "seq_mean_k3",
    "seq_max_k2",
    "seq_max_k3",
)
"""Rejection criteria of rollout correction (``rllm.algorithm.rollout_correction.rollout_rs``, verl's names).

A level (token, or the sum, mean or max over a sequence) of a divergence estimate of the
trained policy from the sampler (k1 = -log ratio, bounded on both sides; k2, k3 bounded above).
"""


RejectionSamplingMode = Literal["none", "episode", "group", "batch"]
REJECTION_SAMPLING_MODES: tuple[str, ...] = ("none", "episode", "group", "batch")
"""``rllm.rejection_sample.mode``: which groups a step keeps (not rollout correction's :data:`REJECTION_MODES`)."""

FAILURE_POLICIES: tuple[str, ...] = ("retry", "drop_group", "fail")
"""``rllm.workflow.failure_policy``: what a workflow that raised does to its group and the run."""

EXECUTOR_NAMES: tuple[str, ...] = ("local", "ray")
"""``rllm.workflow.executor``: where workflows run."""

EXECUTOR_METHODS: tuple[str, ...] = ("start", "prepare", "run", "shutdown")
"""The methods of the workflow engine's ``Executor``, each of which an executor must have."""

ENGINE_METHODS: tuple[str, ...] = ("generate", "for_episode", "for_workers")
"""The methods of ``RolloutEngine``, each of which an engine must have."""
