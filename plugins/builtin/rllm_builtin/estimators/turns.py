"""Turn-level credit for multi-turn episodes: each turn compared with the same turn of the task's other rollouts.

A trajectory's steps are its turns. The return from turn t is ``G_t = r_t + gamma G_{t+1}``
over the step rewards (Monte Carlo, no critic). Turn t of a rollout is then compared with
turn t of the other rollouts of its group, in one of two ways:

``baseline="survivors"``
    against the rollouts that reached turn t (rLLM's older step-index grouping). When the
    policy decides when to stop, this is biased: the rollouts still running at turn t are a
    selection (often the ones that have not solved the task yet), so the baseline rewards or
    punishes reaching turn t rather than what was done there.
``baseline="all"`` (default)
    against every rollout of the group, a rollout that already ended counting as return 0 from
    then on. Who is compared no longer depends on who survived, so stopping early or late is
    credited through the returns themselves.

Worked example (docs/estimators.md): rollout A solves the task at turn 0 (reward 1) and stops;
rollout B fails at turn 0, then solves it at turn 1. With gamma 1, G_A = [1], G_B = [1, 1].
"survivors" compares B's turn 1 with B alone, a comparison set of one that carries no
signal (its return as it is under ``single="raw"``, 0 under ``"zero"``); "all" compares it with
A's 0 and B's 1, mean 1/2, so B's recovery at turn 1 earns +1/2.
"""

from __future__ import annotations

import numpy as np

from rllm.toolkit import AdvantageBatch, Numerics, Ragged, normalise_groups, suffix_discounted


def turn_grpo(
    batch: AdvantageBatch, *, gamma: float, baseline: str, norm_adv_by_std_in_grpo: bool, numerics: Numerics
) -> Ragged:
    """Turn-level GRPO: each turn's Monte Carlo return against the same turn of the group's other rollouts."""
    steps = batch.require("step_rewards", "turn_grpo")
    dtype = numerics.np_dtype
    returns = suffix_discounted(steps.with_values(steps.values.astype(dtype, copy=True)), gamma)
    if len(returns) == 0:
        return steps.with_values(returns)
    lengths = steps.lengths
    turn = np.arange(len(returns)) - np.repeat(steps.offsets[:-1], lengths)
    group = np.repeat(batch.layout.group_index, lengths)
    longest = int(lengths.max())
    key = group.astype(np.int64) * longest + turn  # one label per (group, turn)
    turns = AdvantageBatch(returns, key, dtype=dtype, kernels=batch.layout.kernels)  # the door's kernels
    if baseline == "survivors":
        return steps.with_values(normalise_groups(turns, returns, numerics, "turn_grpo", norm_adv_by_std_in_grpo))
    # "all": the group's every rollout counts, those that ended with return 0.
    layout = turns.layout
    members = batch.layout.sizes[layout.labels // longest].astype(dtype)
    means = layout.sum(returns) / members
    centred = returns - layout.spread(means)
    if not norm_adv_by_std_in_grpo:
        return steps.with_values(centred)
    ended = members - layout.sizes
    squares = layout.sum_sq(centred) + ended * means * means
    std = np.sqrt(squares / np.maximum(members - numerics.ddof, 1))
    with np.errstate(divide="ignore"):
        scale = np.where(members > 1, 1.0 / (std + numerics.eps), 1.0).astype(dtype)
    return steps.with_values(centred * layout.spread(scale))
