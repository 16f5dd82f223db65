"""Per-step estimators: discounted returns over a trajectory's steps (REINFORCE++) and GAE.

They return a :class:`rllm.estimators.batch.Ragged` with one advantage per step (one row
per trajectory); the collection step writes each step its own value.
"""

from __future__ import annotations

from rllm.errors import GroupError
from rllm.toolkit import AdvantageBatch, Numerics, Ragged, suffix_discounted, whiten


def reinforce_plus_plus(batch: AdvantageBatch, *, gamma: float = 1.0, numerics: Numerics) -> Ragged:
    """REINFORCE++ (Hu 2025; verl, OpenRLHF): discounted return-to-go per step, whitened over all steps.

    ``G_t = r_t + gamma G_{t+1}`` over a trajectory's step rewards, then whitened over every
    step of the batch (``numerics.whiten``; verl and OpenRLHF whiten over tokens, here the
    unit is the step).
    """
    steps = batch.require("step_rewards", "reinforce_plus_plus")
    values = steps.values.astype(numerics.np_dtype, copy=False)
    returns = suffix_discounted(steps.with_values(values), gamma)
    return steps.with_values(whiten(returns, numerics))


def gae(
    batch: AdvantageBatch, *, gamma: float = 1.0, lam: float = 0.95, normalize: bool = True, numerics: Numerics
) -> Ragged:
    """GAE (Schulman et al. 2016): ``A_t = delta_t + gamma lam A_{t+1}``, ``delta_t = r_t + gamma V_{t+1} - V_t``.

    ``V`` are the critic's value estimates per step (``step_values``), 0 after the last step.
    With ``normalize`` (verl's default for PPO) the advantages are whitened over all steps.
    """
    rewards = batch.require("step_rewards", "gae")
    values = batch.require("step_values", "gae")
    if rewards.offsets.shape != values.offsets.shape or (rewards.offsets != values.offsets).any():
        raise GroupError("Estimator 'gae' needs one value estimate per step: step_values and step_rewards differ.")
    dtype = numerics.np_dtype
    v = values.values.astype(dtype)
    following = v.copy()
    following[:-1] = v[1:]
    following[rewards.offsets[1:][rewards.lengths > 0] - 1] = 0.0
    delta = rewards.values.astype(dtype) + gamma * following - v
    advantages = suffix_discounted(rewards.with_values(delta), gamma * lam)
    return rewards.with_values(whiten(advantages, numerics) if normalize else advantages)
