"""Group-baseline estimators with another baseline or scale: OPO, ReMax, GPG and MaxRL."""

from __future__ import annotations

import numpy as np

from rllm.toolkit import AdvantageBatch, FloatArray, Numerics, centre, lone_groups, normalise_groups, rewards_as


def opo(batch: AdvantageBatch, *, numerics: Numerics) -> FloatArray:
    """OPO (Hao et al. 2025, "On-Policy RL with Optimal Reward Baseline"; verl): length-weighted baseline.

    ``A_i = r_i - sum_j(len_j r_j) / sum_j(len_j)`` over the group, ``len`` the response
    length in tokens. A group whose lengths sum to 0 falls back to the plain mean; a group
    of one has baseline 0 under ``single="raw"`` (verl) or advantage 0 under ``"zero"``.
    """
    layout = batch.layout
    xs = rewards_as(batch, numerics)
    lengths = rewards_as(batch, numerics, batch.require("response_lengths", "opo"))
    lone = lone_groups(layout, numerics, "opo")
    total = layout.sum(lengths)
    weighted = layout.sum(lengths * xs)
    plain = layout.sum(xs) / layout.sizes
    with np.errstate(divide="ignore", invalid="ignore"):
        baseline = np.where(total > 0, weighted / total, plain)
    if lone is not None and numerics.single == "raw":
        baseline[lone] = 0.0
    return np.subtract(xs, layout.spread(baseline.astype(xs.dtype, copy=False)))


def remax(batch: AdvantageBatch, *, numerics: Numerics) -> FloatArray:
    """ReMax (Li et al. 2023; verl): ``A_i = r_i - b_i``, ``b_i`` the reward of a greedy rollout of the same prompt.

    The backend supplies ``b`` as ``baseline_rewards`` (``trajectory.info["baseline_reward"]``).
    """
    baseline = batch.require("baseline_rewards", "remax").astype(numerics.np_dtype, copy=False)
    return batch.rewards.astype(numerics.np_dtype, copy=False) - baseline


def gpg(batch: AdvantageBatch, *, f_norm: float, numerics: Numerics) -> FloatArray:
    """GPG (Chu et al. 2025, "Group Policy Gradient"; verl): ``A_i = alpha (r_i - mean_g) / f_norm``.

    ``alpha = N / max(1, number of non-zero rewards in the batch)`` rescales the gradient
    so that batches where few rollouts earn a reward are not drowned out; ``f_norm`` (verl's
    option, default 1) divides the result.
    """
    xs = rewards_as(batch, numerics)
    centred = normalise_groups(batch, xs, numerics, "gpg", by_std=False)
    centred *= len(xs) / max(1, int(np.count_nonzero(xs))) / f_norm
    return centred


def maxrl(batch: AdvantageBatch, *, numerics: Numerics) -> FloatArray:
    """MaxRL (SkyRL): ``A_i = (r_i - mean_g) / (mean_g + eps)``, the relative gain over the group's success rate.

    Meant for rewards in [0, 1]; a group with mean 0 gets 0. A group of one is compared with
    its own reward (advantage 0) unless ``single="error"``.
    """
    layout = batch.layout
    xs = rewards_as(batch, numerics)
    lone_groups(layout, numerics, "maxrl")
    centred, means = centre(layout, xs, None, numerics)
    with np.errstate(divide="ignore"):
        scale = 1.0 / (means + numerics.eps)
    scale[means + numerics.eps == 0] = 0.0
    return np.multiply(centred, layout.spread(scale.astype(xs.dtype, copy=False)), out=centred)
