"""The distillation signal: each token's teacher-minus-student log-prob gap, discounted and clipped."""

from __future__ import annotations

import math

import numpy as np

from rllm.errors import EstimatorOptionError
from rllm.estimators.ragged import Ragged
from rllm.estimators.statistics import suffix_discounted


def reverse_kl_advantages(
    teacher: Ragged,
    student: Ragged,
    *,
    coef: float = 1.0,
    discount: float = 0.0,
    clip_min: float | None = None,
    clip_max: float | None = None,
) -> Ragged:
    """``clip(sum_{j >= t} discount^(j - t) coef (teacher_j - student_j))`` within each row (rLLM's rule).

    The rows are trajectories (or steps) of response tokens, ``teacher`` and ``student`` the
    log-probs of the sampled tokens; None clip bounds leave that side open.
    """
    if clip_min is not None and clip_max is not None and clip_min > clip_max:
        raise EstimatorOptionError(f"clip_min={clip_min:g} is above clip_max={clip_max:g}; give clip_min <= clip_max.")
    gap = coef * (np.asarray(teacher.values, dtype=np.float64) - np.asarray(student.values, dtype=np.float64))
    if discount > 0:
        gap = suffix_discounted(teacher.with_values(gap), discount)
    low = -math.inf if clip_min is None else clip_min
    high = math.inf if clip_max is None else clip_max
    return Ragged(values=np.clip(gap, low, high), offsets=teacher.offsets, per_token=True)
