"""Metric reductions over trajectory groups, as rLLM's ``rllm.trainer.algorithms.metrics`` offers them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from rllm.types import TrajectoryGroup


def reduce_metrics_by_trajectory_name(
    trajectory_groups: Sequence[TrajectoryGroup], prefix: str = "reward", include_fraction_zero: bool = False
) -> dict[str, float]:
    """Mean, max, min and population std of the rewards of each trajectory name (unset rewards skipped)."""
    rewards: dict[str, list[float]] = {}
    for group in trajectory_groups:
        for traj in group.trajectories:
            values = rewards.setdefault(traj.name, [])
            if traj.reward is not None:
                values.append(float(traj.reward))
    metrics: dict[str, float] = {}
    for name, values in rewards.items():
        if not values:
            continue
        array = np.asarray(values)
        metrics[f"{prefix}/{name}/mean"] = float(array.mean())
        metrics[f"{prefix}/{name}/max"] = float(array.max())
        metrics[f"{prefix}/{name}/min"] = float(array.min())
        metrics[f"{prefix}/{name}/std"] = float(array.std())
        if include_fraction_zero:
            metrics[f"{prefix}/{name}/fraction_zero"] = float(np.count_nonzero(np.abs(array) < 1e-8) / len(array))
    return metrics


def reduce_metrics_lists(metrics: dict[str, Any], reduce_fn: Callable[[list[Any]], Any] = np.mean) -> None:
    """Reduce, in place, every metric whose value is a list to one value (the mean by default)."""
    for key, value in metrics.items():
        if isinstance(value, list):
            metrics[key] = reduce_fn(value)
