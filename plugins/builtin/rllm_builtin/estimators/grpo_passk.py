"""Pass@k-oriented GRPO: only the best rollout of a group is credited."""

from __future__ import annotations

import numpy as np

from rllm.errors import GroupError
from rllm.toolkit import AdvantageBatch, FloatArray, Numerics, centre, group_std, rewards_as


def grpo_passk(batch: AdvantageBatch, *, norm_adv_by_std_in_grpo: bool = True, numerics: Numerics) -> FloatArray:
    """Pass@k GRPO (verl ``grpo_passk``; Chen et al. 2025, "Pass@k Training"): credit only the best rollout.

    In each group the best trajectory gets ``r_max - r_second`` (divided by ``std_g + eps``
    when ``norm_adv_by_std_in_grpo``), all others 0; a tie for the best gives 0 to all.
    Groups of fewer than two trajectories have no runner-up and are refused.
    """
    layout = batch.layout
    if len(layout.sizes) and layout.sizes.min() < 2:
        first = layout.label(int(np.flatnonzero(layout.sizes < 2)[0]))
        raise GroupError(
            f"Estimator 'grpo_passk' needs at least two trajectories per group; group {first!r} has one. "
            "Sample more rollouts per task or drop single-rollout groups."
        )
    xs = rewards_as(batch, numerics)
    best = layout.max(xs)
    is_best = xs == layout.spread(best)
    n_best = layout.sum(is_best.astype(np.intp))
    runner_up = layout.max(np.where(is_best, -np.inf, xs).astype(xs.dtype, copy=False))
    margin = np.where(n_best > 1, 0.0, best - runner_up).astype(xs.dtype, copy=False)
    if norm_adv_by_std_in_grpo:
        centred, _ = centre(layout, xs, None, numerics)
        margin /= group_std(layout, centred, numerics) + numerics.eps
    advantages = np.where(is_best, layout.spread(margin), 0.0).astype(xs.dtype, copy=False)
    return advantages
