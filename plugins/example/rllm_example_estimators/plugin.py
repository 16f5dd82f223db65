"""Hook implementations: the module named by the ``rllm.estimators`` entry point."""

from __future__ import annotations

from typing import Any

import numpy as np

import rllm


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


@rllm.hookimpl
def rllm_register_estimators(register: rllm.plugins.EstimatorRegistrar) -> None:
    register("median_baseline", median_baseline)
    register("rank", rank, style="batch")
