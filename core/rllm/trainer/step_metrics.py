"""What a training step measures besides the backend: each stage's wall time and the episode batch's metrics."""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np

from rllm.types import Episode, TerminationReason


@contextmanager
def stage_timer(name: str, timings: dict[str, float]) -> Iterator[None]:
    """Add the wall time of the ``with`` block to ``timings[name]`` (a stage can run more than once a step)."""
    started = time.perf_counter()
    try:
        yield
    finally:
        timings[name] = timings.get(name, 0.0) + time.perf_counter() - started


def episode_metrics(episodes: Sequence[Episode]) -> dict[str, float]:
    """Averages of the workflows' own metrics and the share of each termination reason."""
    values: dict[str, list[float]] = defaultdict(list)
    for episode in episodes:
        for key, value in episode.metrics.items():
            if isinstance(value, int | float | np.number):
                values[key].append(float(value))
    metrics = {f"batch/{key}": float(np.mean(series)) for key, series in values.items()}
    reasons = Counter(ep.termination_reason for ep in episodes)
    total = max(len(episodes), 1)
    for reason in TerminationReason:
        metrics[f"batch/termination_reason/{reason.value}"] = reasons[reason] / total
    metrics["batch/num_episodes"] = float(len(episodes))
    metrics["batch/accuracy"] = float(np.mean([ep.is_correct for ep in episodes])) if episodes else 0.0
    return metrics
