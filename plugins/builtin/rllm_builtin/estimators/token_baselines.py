"""verl's optimal token baselines: a baseline per token position, weighted by the path's accumulated variance.

OTB (verl 0.9's ``optimal_token_baseline``): for the trajectories ``i`` of a group and each
token position ``t``, ``B_t = sum_i G_i W_it / (sum_i W_it + epsilon)``, where ``G_i`` is the
return (the trajectory's reward at every token) and ``W_it = sum_{j <= t} (1 - 2 pi_ij + S_ij)``
accumulates each token's variance proxy from the old policy's probability of the sampled token
``pi`` and the sum of squared probabilities over the vocabulary ``S`` (``sum_pi_squared``).
``A_it = G_i - B_t``. A group's longest trajectory, when it alone is longest, gets baseline 0
past the second-longest one's end (``handle_zero_tail``); a group of one keeps its return
(``single="raw"``) or gets 0 (``single="zero"``).

A trajectory's tokens are its steps' response tokens in order, so positions count response
tokens only: verl's multi-turn twin (``tir_optimal_token_baseline``) aligns them the same way,
and leaves trajectories without a token out of their group, which the single-turn one counts.
"""

from __future__ import annotations

import numpy as np

from rllm.errors import InputFieldError
from rllm.toolkit import AdvantageBatch, Numerics, Ragged, lone_groups


def optimal_token_baseline(
    batch: AdvantageBatch, *, handle_zero_tail: bool = True, epsilon: float = 1e-8, numerics: Numerics
) -> Ragged:
    """verl's OTB (single-turn): trajectories without a response token count in their group."""
    return _token_baseline(batch, "optimal_token_baseline", handle_zero_tail, epsilon, numerics, skip_empty=False)


def tir_optimal_token_baseline(
    batch: AdvantageBatch, *, handle_zero_tail: bool = True, epsilon: float = 1e-8, numerics: Numerics
) -> Ragged:
    """verl's multi-turn OTB: as OTB over response tokens, trajectories without one left out of their group."""
    return _token_baseline(batch, "tir_optimal_token_baseline", handle_zero_tail, epsilon, numerics, skip_empty=True)


def _token_baseline(
    batch: AdvantageBatch, name: str, handle_zero_tail: bool, epsilon: float, numerics: Numerics, skip_empty: bool
) -> Ragged:
    dtype = numerics.np_dtype
    old = batch.require("old_log_probs", name)
    squares = batch.require("sum_pi_squared", name)
    if not np.array_equal(old.offsets, squares.offsets):
        raise InputFieldError(
            f"Estimator {name!r}: old_log_probs and sum_pi_squared have different token counts for some "
            "trajectory; give both one value per response token."
        )
    lengths = old.lengths
    proxy = (1.0 - 2.0 * np.exp(old.values.astype(dtype)) + squares.values.astype(dtype)).astype(dtype)
    rewards = batch.rewards.astype(dtype)
    returns = np.repeat(rewards, lengths)
    baseline = np.zeros_like(returns)
    layout = batch.layout
    order = np.argsort(layout.group_index, kind="stable")
    members_of = np.split(order, np.cumsum(layout.sizes)[:-1])
    for members in members_of:
        if skip_empty:
            members = members[lengths[members] > 0]
        if len(members) < 2:
            continue
        width = int(lengths[members].max())
        if width == 0:
            continue
        w = np.zeros((len(members), width), dtype=dtype)
        for row, i in enumerate(members):
            w[row, : lengths[i]] = np.cumsum(proxy[old.offsets[i] : old.offsets[i + 1]], dtype=dtype)
        numerator = (rewards[members, None] * w).sum(axis=0)
        per_position = (numerator / (w.sum(axis=0) + dtype.type(epsilon))).astype(dtype)
        ranked = np.sort(lengths[members])
        longest = int(ranked[-1])
        alone = handle_zero_tail and ranked[-1] > ranked[-2]
        for i in members:
            n = int(lengths[i])
            values = per_position[:n].copy()
            if alone and n == longest:
                values[int(ranked[-2]) :] = 0.0
            baseline[old.offsets[i] : old.offsets[i + 1]] = values
    lone = lone_groups(layout, numerics, name)
    advantages = returns - baseline
    if lone is not None and numerics.single == "zero":
        advantages[np.repeat(lone[layout.group_index], lengths)] = 0.0
    return Ragged(values=advantages, offsets=old.offsets, per_token=True)
