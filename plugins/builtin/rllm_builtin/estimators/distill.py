"""On-policy distillation (rLLM's ``distill``): each token's advantage is how much likelier the teacher finds it.

``A_t = clip(sum_{j >= t} discount^(j - t) * coef * (teacher_t - student_t), clip_min, clip_max)``
with the log-probs of the sampled token under the teacher and under the student that sampled
it (the step's ``logprobs``); discount 0 (the default) is the per-token reverse-KL signal
alone. Rewards do not enter. A trajectory's tokens are its steps' response tokens in order, so
a discount reaches across a multi-step trajectory's steps, where rLLM's per-step
``compute_step_distill_advantage`` stops at each step's end.
"""

from __future__ import annotations

import numpy as np

from rllm.errors import EstimatorOptionError, InputFieldError
from rllm.toolkit import AdvantageBatch, Ragged, reverse_kl_advantages

NAME = "distill"


def distill(
    batch: AdvantageBatch,
    *,
    kl_penalty_coef: float = 1.0,
    kl_discount_factor: float = 0.0,
    clip_min: float | None = None,
    clip_max: float | None = None,
) -> Ragged:
    """Per-token advantages from a teacher's and the sampler's log-probs (rLLM's ``compute_distill_reverse_kl``)."""
    teacher = batch.require("teacher_log_probs", NAME)
    student = batch.require("rollout_log_probs", NAME)
    if not np.array_equal(teacher.offsets, student.offsets):
        raise InputFieldError(
            f"Estimator {NAME!r}: teacher_log_probs and rollout_log_probs have different token counts for some "
            "trajectory; give both one value per response token."
        )
    try:
        return reverse_kl_advantages(
            teacher, student, coef=kl_penalty_coef, discount=kl_discount_factor, clip_min=clip_min, clip_max=clip_max
        )
    except EstimatorOptionError as exc:
        raise EstimatorOptionError(f"Estimator {NAME!r}: {exc}") from None
