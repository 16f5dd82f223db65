"""Hook implementations: the module named by the ``rllm.estimators`` entry point."""

from __future__ import annotations

from typing import Any

import numpy as np

import rllm
from rllm.toolkit import AdvantageBatch, FloatArray, Numerics, Option, centre, group_std, lone_groups, rewards_as


def median_baseline(rewards: list[np.ndarray], **options: Any) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Each reward minus the median of its group (grouped style: one array per group)."""
    advantages = [group - np.median(group) for group in rewards]
    return advantages, advantages


def rank(batch: rllm.AdvantageBatch) -> np.ndarray:
    """Centred rank of each reward within its group, scaled to [-1, 1]; ties share their mean rank.

    Batch style: one call for all groups. A group of one gets 0.
    """
    layout = batch.layout
    advantages = np.zeros(len(batch))
    for group, rewards in enumerate(layout.split(batch.rewards)):
        n = len(rewards)
        if n < 2:
            continue
        # Mean rank of each value: count of smaller values plus half the count of equal others.
        smaller = (rewards[None, :] < rewards[:, None]).sum(axis=1)
        equal = (rewards[None, :] == rewards[:, None]).sum(axis=1) - 1
        ranks = smaller + equal / 2.0
        scaled = 2.0 * ranks / (n - 1) - 1.0
        start = layout.starts[group]
        positions = np.arange(start, start + n) if layout.order is None else layout.order[start : start + n]
        advantages[positions] = scaled
    return advantages


def scaled_median(batch: AdvantageBatch, *, clip: float | None, numerics: Numerics) -> FloatArray:
    """Each reward minus its group's median, divided by the group std + eps; numerics follow the preset.

    Registered with ``numerics=True``, so ``preset="verl"`` (unbiased std, float32), ``std``,
    ``eps``, ``single`` and ``dtype`` work exactly as for the built-in estimators.
    """
    layout = batch.layout
    xs = rewards_as(batch, numerics)
    lone = lone_groups(layout, numerics, "scaled_median")
    centred, _ = centre(layout, xs, lone, numerics)  # for the std only
    scale = 1.0 / (group_std(layout, centred, numerics) + numerics.eps)
    medians = np.array([np.median(group) for group in layout.split(xs)], dtype=xs.dtype)
    advantages = (xs - layout.spread(medians)) * layout.spread(scale.astype(xs.dtype))
    if lone is not None:
        advantages[layout.spread(lone)] = 0.0
    return advantages if clip is None else np.clip(advantages, -clip, clip)


@rllm.hookimpl
def rllm_register_estimators(register: rllm.plugins.EstimatorRegistrar) -> None:
    register("median_baseline", median_baseline)
    register("rank", rank, style="batch", options=())
    clip = Option("clip", (float,), None, "clip advantages to [-clip, clip] (default: no clipping)", minimum=0.0)
    register("scaled_median", scaled_median, style="batch", options=[clip], numerics=True)
