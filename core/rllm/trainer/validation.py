"""Validation metrics per data source: pass@1 and pass@k, with k the samples actually drawn."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from rllm.types import Episode, TerminationReason

UNKNOWN_SOURCE = "unknown"


def data_source_of(episode: Episode) -> str:
    return str(episode.info.get("data_source") or UNKNOWN_SOURCE)


def pass_at_k_metrics(episodes: Sequence[Episode]) -> dict[str, float]:
    """``val/{source}/pass@1`` (mean correctness) and ``val/{source}/pass@{k}`` per data source.

    ``k`` is the smallest number of rollouts any task of that source got, and pass@k uses the
    first ``k`` rollouts of every task, so the label always matches what was measured even
    when some rollouts were lost. Workflow metrics and termination reasons are averaged per
    source as well.
    """
    by_source: dict[str, list[Episode]] = defaultdict(list)
    for episode in episodes:
        by_source[data_source_of(episode)].append(episode)
    metrics: dict[str, float] = {}
    for source, source_episodes in sorted(by_source.items()):
        prefix = f"val/{source}"
        correct = np.array([bool(ep.is_correct) for ep in source_episodes], dtype=float)
        metrics[f"{prefix}/pass@1"] = float(correct.mean())
        per_task: dict[str, list[Episode]] = defaultdict(list)
        for episode in source_episodes:
            per_task[episode.task_id].append(episode)
        k = min(len(rollouts) for rollouts in per_task.values())
        if k > 1:
            solved = [
                any(ep.is_correct for ep in sorted(rollouts, key=lambda e: e.rollout_idx)[:k])
                for rollouts in per_task.values()
            ]
            metrics[f"{prefix}/pass@{k}"] = float(np.mean(solved))
        metrics[f"{prefix}/num_tasks"] = float(len(per_task))
        values: dict[str, list[float]] = defaultdict(list)
        for episode in source_episodes:
            for key, value in episode.metrics.items():
                if isinstance(value, int | float | np.number):
                    values[key].append(float(value))
        for key, series in values.items():
            metrics[f"{prefix}/{key}"] = float(np.mean(series))
        for reason in TerminationReason:
            share = sum(ep.termination_reason is reason for ep in source_episodes) / len(source_episodes)
            if share:
                metrics[f"{prefix}/termination_reason/{reason.value}"] = share
    return metrics
