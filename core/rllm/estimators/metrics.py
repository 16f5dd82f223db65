"""Reward and advantage summaries (mean, std, max, min) for a run's metrics, safe near the float limit."""

from __future__ import annotations

import math

import numpy as np


def _reward_metrics(role: str, rewards: np.ndarray, good: np.ndarray | None, metrics: dict[str, float]) -> None:
    """Reward statistics over the rollouts that count; how many did not, when some did not."""
    summarize(f"reward/{role}", rewards if good is None else rewards[good], metrics)
    if good is not None:
        metrics[f"reward/{role}/left_out"] = float(len(good) - np.count_nonzero(good))


_LARGE = 1e150
"""Above this magnitude summaries are computed on scaled values (squares would overflow)."""


def summarize(prefix: str, values: np.ndarray, metrics: dict[str, float], zero_fraction: bool = False) -> None:
    """``{prefix}/mean``, ``std``, ``max`` and ``min`` of ``values`` (and the share of zeros) into ``metrics``."""
    if len(values) == 0:
        return
    top = float(np.max(np.abs(values)))
    scale = top if _LARGE < top < math.inf else 1.0  # near the float limit the mean and std overflow
    scaled = values / scale if scale != 1.0 else values
    metrics[f"{prefix}/mean"] = float(np.mean(scaled)) * scale
    metrics[f"{prefix}/std"] = float(np.std(scaled)) * scale
    metrics[f"{prefix}/max"] = float(np.max(values))
    metrics[f"{prefix}/min"] = float(np.min(values))
    if zero_fraction:
        metrics[f"{prefix}/fraction_zero"] = float(np.count_nonzero(np.abs(values) < 1e-8) / len(values))
