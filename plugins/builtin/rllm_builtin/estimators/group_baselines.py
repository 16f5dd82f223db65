"""Estimators that compare each trajectory with the other rollouts of its group.

Every kernel works on the whole batch at once with segment reductions (no loop over
groups), takes the numerics options of :func:`rllm.estimators.numerics.resolve_numerics`
and treats groups of one trajectory by the ``single`` policy.
"""

from __future__ import annotations

import numpy as np

from rllm.estimators.batch import AdvantageBatch, FloatArray
from rllm.estimators.numerics import Numerics, SinglePolicy, StdDivisor, resolve_numerics


def _singles(batch: AdvantageBatch) -> np.ndarray | None:
    """Per-trajectory mask of groups of one, or None when there are none."""
    lone = batch.layout.sizes == 1
    return batch.layout.spread(lone) if lone.any() else None


def _group_std(batch: AdvantageBatch, centred: FloatArray, numerics: Numerics) -> FloatArray:
    sizes = batch.layout.sizes
    divisor = np.maximum(sizes - numerics.ddof, 1).astype(centred.dtype)
    return np.sqrt(batch.layout.sum_sq_dev(centred) / divisor)


def grpo(
    batch: AdvantageBatch,
    *,
    norm_adv_by_std_in_grpo: bool = True,
    preset: str | None = None,
    std: StdDivisor | None = None,
    eps: float | None = None,
    epsilon: float | None = None,
    episilon: float | None = None,
    single: SinglePolicy | None = None,
    dtype: str | None = None,
) -> FloatArray:
    """GRPO (Shao et al. 2024, DeepSeekMath): ``(r_i - mean_g) / (std_g + eps)``.

    With ``norm_adv_by_std_in_grpo=False`` only the group mean is subtracted. A group of one
    uses mean 0 and std 1 (``single="raw"``, rLLM and verl) or gets 0 (``single="zero"``).
    """
    numerics = resolve_numerics(preset, std=std, eps=eps, epsilon=epsilon, episilon=episilon, single=single, dtype=dtype)
    rewards = batch.rewards.astype(numerics.np_dtype, copy=False)
    centred, _ = batch.layout.centred(rewards)
    if norm_adv_by_std_in_grpo:
        scale = _group_std(batch, centred, numerics) + numerics.eps
        advantages = centred / batch.layout.spread(scale)
        lone_value = rewards / (1.0 + numerics.eps)
    else:
        advantages = centred
        lone_value = rewards
    lone = _singles(batch)
    if lone is not None:
        advantages[lone] = lone_value[lone] if numerics.single == "raw" else 0.0
    return advantages


def rloo(
    batch: AdvantageBatch,
    *,
    preset: str | None = None,
    single: SinglePolicy | None = None,
    dtype: str | None = None,
) -> FloatArray:
    """RLOO (Ahmadian et al. 2024): ``r_i`` minus the mean of the other rollouts, ``n/(n-1) (r_i - mean_g)``.

    A group of one keeps its raw reward (``single="raw"``) or gets 0 (``single="zero"``).
    """
    numerics = resolve_numerics(preset, single=single, dtype=dtype)
    rewards = batch.rewards.astype(numerics.np_dtype, copy=False)
    centred, _ = batch.layout.centred(rewards)
    sizes = batch.layout.sizes
    factor = sizes / np.maximum(sizes - 1, 1)
    advantages = centred * batch.layout.spread(factor.astype(rewards.dtype))
    lone = _singles(batch)
    if lone is not None:
        advantages[lone] = rewards[lone] if numerics.single == "raw" else 0.0
    return advantages


def reinforce(batch: AdvantageBatch, *, dtype: str | None = None) -> FloatArray:
    """REINFORCE (Williams 1992) without a baseline: the advantage is the reward."""
    return batch.rewards.astype(dtype or batch.rewards.dtype, copy=True)


def reinforce_plus_plus_baseline(
    batch: AdvantageBatch,
    *,
    preset: str | None = None,
    std: StdDivisor | None = None,
    eps: float | None = None,
    epsilon: float | None = None,
    episilon: float | None = None,
    single: SinglePolicy | None = None,
    dtype: str | None = None,
) -> FloatArray:
    """REINFORCE++ with a group baseline (Hu 2025; verl): ``c_i = r_i - mean_g``, then ``c / (std(c) + eps)``.

    The std is taken over the whole batch (all groups of a role). A group of one has baseline
    0 (``single="raw"``) or its advantage is 0 (``single="zero"``).
    """
    numerics = resolve_numerics(preset, std=std, eps=eps, epsilon=epsilon, episilon=episilon, single=single, dtype=dtype)
    rewards = batch.rewards.astype(numerics.np_dtype, copy=False)
    centred, _ = batch.layout.centred(rewards)
    lone = _singles(batch)
    if lone is not None:
        centred[lone] = rewards[lone] if numerics.single == "raw" else 0.0
    spread = float(np.std(centred, ddof=numerics.ddof)) if len(centred) > numerics.ddof else 0.0
    return centred / (spread + numerics.eps)
