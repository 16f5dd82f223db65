"""GiGPO (Feng et al. 2025, arXiv 2505.10978): episode-level plus step-level relative advantages.

Two levels of groups, both without a critic:

* the **episode group** is the task's rollouts (the trajectory group): each trajectory's reward
  against the group's, ``A_E = (R_i - mean) / F`` (the paper's Eq. 3);
* the **step group** (an *anchor state*) holds every step, across the episode group's
  trajectories, taken from one and the same environment state. A step's discounted return
  ``R_t = sum_k gamma^k r_{t+k}`` over the step rewards (Eq. 5) is compared with the returns of
  the other steps taken from that state, ``A_S = (R_t - mean) / F`` (Eq. 7); a state visited
  once gives 0.

A step's advantage is ``A_E + omega * A_S`` (Eq. 8). ``F`` is 1 under ``mode="mean_norm"`` (the
paper's choice for agents and verl-agent's default) and the group's standard deviation plus
``eps`` under ``"mean_std_norm"``.

The anchor-state grouping hook (``rllm.grouping_hook: anchor_states``) labels every step with its
state within its trajectory group (``step.info["anchor_state"]``), read by the estimator as the
per-step batch field ``anchor_states``: the state key the workflow sets
(``step.info["state_key"]``, the hook's option ``state_key``), else the step's observation. A
trajectory group none of whose steps has either falls back to episode groups: the hook warns
naming the group, and every step there is its own state (step-level advantage 0), so those
trajectories get GRPO's episode-level advantage.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from rllm.errors import DataError, GroupError
from rllm.toolkit import AdvantageBatch, BatchField, Numerics, Ragged, normalise_groups, rewards_as, suffix_discounted
from rllm.types import Trajectory

ANCHOR_INFO = "anchor_state"
"""The ``step.info`` key the grouping hook writes: the step's state, numbered within its trajectory group."""

HOOK_NAME = "anchor_states"
MODES = ("mean_norm", "mean_std_norm")


def gigpo(batch: AdvantageBatch, *, omega: float, gamma: float, mode: str, numerics: Numerics) -> Ragged:
    """One advantage per step: the trajectory's episode-level advantage plus ``omega`` times the step's."""
    steps = batch.require("step_rewards", "gigpo")
    anchors = batch.require("anchor_states", "gigpo")
    if steps.offsets.shape != anchors.offsets.shape or (steps.offsets != anchors.offsets).any():
        raise GroupError(
            "Estimator 'gigpo' needs one anchor state per step: anchor_states and step_rewards have different "
            "numbers of steps."
        )
    by_std = mode == "mean_std_norm"
    episode = normalise_groups(batch, rewards_as(batch, numerics), numerics, "gigpo", by_std)
    dtype = numerics.np_dtype
    returns = suffix_discounted(steps.with_values(steps.values.astype(dtype, copy=True)), gamma)
    if len(returns) == 0:
        return steps.with_values(returns)
    group = np.repeat(batch.layout.group_index, steps.lengths).astype(np.float64)
    pairs = np.column_stack([group, anchors.values.astype(np.float64)])
    _, labels = np.unique(pairs, axis=0, return_inverse=True)  # one label per (episode group, state)
    states = AdvantageBatch(returns, labels.reshape(-1), dtype=dtype, kernels=batch.layout.kernels)
    alone_is_zero = dataclasses.replace(numerics, single="zero")  # a state visited once carries no comparison
    step = normalise_groups(states, returns, alone_is_zero, "gigpo", by_std)
    return steps.with_values(np.repeat(episode, steps.lengths) + dtype.type(omega) * step)


def _read_anchor_states(trajectory: Trajectory) -> list[Any]:
    values = [step.info.get(ANCHOR_INFO) for step in trajectory.steps]
    if any(value is None for value in values):
        position = values.index(None)
        raise DataError(
            f"step {position} has no info[{ANCHOR_INFO!r}]; set rllm.grouping_hook={HOOK_NAME}, which numbers "
            "each step's environment state"
        )
    return values


ANCHOR_FIELD = BatchField(
    read=_read_anchor_states,
    per_step=True,
    doc="list of numbers: each step's environment state (equal numbers: the same state within a group)",
)
"""The per-step batch field ``anchor_states`` that ``gigpo`` requires."""
