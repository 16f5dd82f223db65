"""Estimators that compare each trajectory with the other rollouts of its group.

Every kernel works on the whole batch at once with segment reductions (no loop over
groups), takes the numerics options of :func:`rllm.estimators.numerics.resolve_numerics`
and treats groups of one trajectory by the ``single`` policy (``"raw"``: baseline 0 and
std 1, as rLLM and verl do; ``"zero"``: advantage 0; ``"error"``: refused).
"""

from __future__ import annotations

import numpy as np

from rllm.toolkit import (
    RLOO_FACTOR,
    AdvantageBatch,
    FloatArray,
    Numerics,
    accelerated_centre,
    batch_std,
    centre,
    lone_groups,
    normalise_groups,
    rewards_as,
    whiten,
    whitening_weights,
)


def grpo(batch: AdvantageBatch, *, norm_adv_by_std_in_grpo: bool = True, numerics: Numerics) -> FloatArray:
    """GRPO (Shao et al. 2024, DeepSeekMath): ``A_i = (r_i - mean_g) / (std_g + eps)``.

    With ``norm_adv_by_std_in_grpo=False`` only the group mean is subtracted (see ``dr_grpo``).
    A group of one uses mean 0 and std 1 under ``single="raw"`` (rLLM, verl, SkyRL).
    """
    xs = rewards_as(batch, numerics)
    return normalise_groups(batch, xs, numerics, "grpo", norm_adv_by_std_in_grpo)


def dr_grpo(batch: AdvantageBatch, *, numerics: Numerics) -> FloatArray:
    """Dr. GRPO (Liu et al. 2025, "Understanding R1-Zero-Like Training"): ``A_i = r_i - mean_g``.

    GRPO without the division by the group std, which biases towards low-variance groups.
    """
    xs = rewards_as(batch, numerics)
    return normalise_groups(batch, xs, numerics, "dr_grpo", by_std=False)


def grpo_batch_std(batch: AdvantageBatch, *, numerics: Numerics) -> FloatArray:
    """GRPO with batch std (TRL ``scale_rewards="batch"``): ``A_i = (r_i - mean_g) / (std(r over batch) + eps)``.

    Group means remove the prompt's difficulty; one std over the whole batch keeps the
    relative scale of groups (Liu et al. 2025 argue against per-group scaling).
    """
    xs = rewards_as(batch, numerics)
    centred = normalise_groups(batch, xs, numerics, "grpo_batch_std", by_std=False)
    spread = batch_std(xs, float(xs.mean()), numerics.ddof) + numerics.eps
    centred *= 1.0 / spread if spread > 0 else 0.0
    return centred


def rloo(batch: AdvantageBatch, *, numerics: Numerics) -> FloatArray:
    """RLOO (Ahmadian et al. 2024): ``r_i`` minus the mean of the others, ``n/(n-1) (r_i - mean_g)``.

    A group of one keeps its raw reward (``single="raw"``, rLLM and verl's loop) or gets 0.
    """
    layout = batch.layout
    xs = rewards_as(batch, numerics)
    done = accelerated_centre(batch, xs, numerics, RLOO_FACTOR, "rloo")
    if done is not None:
        return done
    lone = lone_groups(layout, numerics, "rloo")
    centred, _ = centre(layout, xs, lone, numerics)
    k = layout.uniform_size
    if k is not None:
        if k > 1:
            centred *= k / (k - 1)
        return centred
    sizes = layout.sizes
    factor = (sizes / np.maximum(sizes - 1, 1)).astype(centred.dtype)
    return layout.scale(centred, factor)


def reinforce(batch: AdvantageBatch, *, numerics: Numerics) -> FloatArray:
    """REINFORCE (Williams 1992) without a baseline: the advantage is the reward."""
    return batch.rewards.astype(numerics.np_dtype, copy=True)


def reinforce_plus_plus_baseline(batch: AdvantageBatch, *, numerics: Numerics) -> FloatArray:
    """REINFORCE++ with a group baseline (Hu 2025; verl): ``c_i = r_i - mean_g``, then whitened over the batch.

    Whitening follows ``numerics.whiten``: ``c / (std(c) + eps)`` for rLLM, ``(c - mean(c)) /
    sqrt(var(c) + 1e-8)`` for verl, whose mean and variance count each response once per token
    (``whiten_weight="tokens"``, from ``response_lengths``). The batch is all groups of one
    role. A group of one has baseline 0 (``single="raw"``) or advantage 0 (``single="zero"``).
    """
    name = "reinforce_plus_plus_baseline"
    xs = rewards_as(batch, numerics)
    centred = normalise_groups(batch, xs, numerics, name, by_std=False)
    return whiten(centred, numerics, shift=False, weights=whitening_weights(batch, numerics, name))


def prpo(batch: AdvantageBatch, *, numerics: Numerics) -> FloatArray:
    """PRPO (rLLM): raw rewards whitened over the batch, ``(r_i - mean) / (std + eps)``, with no group baseline.

    The batch is all groups of one role; the std is the population std unless ``std`` or
    ``whiten_std`` say otherwise, and ``whiten`` selects the variance-based styles as for
    REINFORCE++ (``whiten_weight="tokens"`` counts each reward once per response token).
    """
    return whiten(rewards_as(batch, numerics).copy(), numerics, weights=whitening_weights(batch, numerics, "prpo"))
