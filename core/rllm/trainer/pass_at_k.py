"""Validation metrics per data source: the unbiased pass@k for each configured k."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from fractions import Fraction
from math import comb

import numpy as np

from rllm.types import Episode, TerminationReason

UNKNOWN_SOURCE = "unknown"


def data_source_of(episode: Episode) -> str:
    return str(episode.info.get("data_source") or UNKNOWN_SOURCE)


def unbiased_pass_at_k(n: int, c: int, k: int) -> float:
    """The chance that ``k`` of ``n`` samples, ``c`` of them correct, drawn without replacement, hold a correct one.

    ``1 - C(n-c, k) / C(n, k)`` (Chen et al. 2021), computed exactly; needs ``k <= n``.
    """
    return float(1 - Fraction(comb(n - c, k), comb(n, k)))


def pass_at_k_metrics(episodes: Sequence[Episode], ks: Sequence[int] = (1,)) -> dict[str, float]:
    """``val/{source}/pass@{k}`` for every k in ``ks``, per data source: the unbiased estimator averaged over tasks.

    A task contributes to pass@k when it got at least ``k`` rollouts (one lost to an error is
    not counted); a k that no task of the source reaches is left out. ``val/{source}/pass@1``
    is always reported. Workflow metrics and termination reasons are averaged per source as well.
    """
    by_source: dict[str, list[Episode]] = defaultdict(list)
    for episode in episodes:
        by_source[data_source_of(episode)].append(episode)
    metrics: dict[str, float] = {}
    for source, source_episodes in sorted(by_source.items()):
        prefix = f"val/{source}"
        per_task: dict[str, list[bool]] = defaultdict(list)
        for episode in source_episodes:
            per_task[episode.task_id].append(bool(episode.is_correct))
        for k in sorted({1, *ks}):
            values = [unbiased_pass_at_k(len(r), sum(r), k) for r in per_task.values() if len(r) >= k]
            if values:
                metrics[f"{prefix}/pass@{k}"] = float(np.mean(values))
        metrics[f"{prefix}/num_tasks"] = float(len(per_task))
        by_metric: dict[str, list[float]] = defaultdict(list)
        for episode in source_episodes:
            for key, value in episode.metrics.items():
                if isinstance(value, int | float | np.number):
                    by_metric[key].append(float(value))
        for key, series in by_metric.items():
            metrics[f"{prefix}/{key}"] = float(np.mean(series))
        for reason in TerminationReason:
            share = sum(ep.termination_reason is reason for ep in source_episodes) / len(source_episodes)
            if share:
                metrics[f"{prefix}/termination_reason/{reason.value}"] = share
    return metrics
