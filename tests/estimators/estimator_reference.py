"""Straightforward per-group implementations, written from the formulas, to check the vectorized kernels.

They loop over groups with plain Python/numpy on purpose: slow and obvious.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np


def by_group(group_ids: Sequence[Any]) -> dict[Any, list[int]]:
    members: dict[Any, list[int]] = defaultdict(list)
    for position, label in enumerate(group_ids):
        members[label].append(position)
    return members


def per_group(
    rule: Callable[[np.ndarray, list[int]], np.ndarray], rewards: Sequence[float], group_ids: Sequence[Any]
) -> np.ndarray:
    out = np.zeros(len(rewards))
    values = np.asarray(rewards, dtype=np.float64)
    for positions in by_group(group_ids).values():
        out[positions] = rule(values[positions], positions)
    return out


def std(values: np.ndarray, ddof: int) -> float:
    n = len(values)
    mean = sum(values) / n
    return (sum((v - mean) ** 2 for v in values) / (n - ddof)) ** 0.5


def grpo(rewards: Sequence[float], group_ids: Sequence[Any], ddof: int = 0, eps: float = 1e-6) -> np.ndarray:
    def rule(r: np.ndarray, _: list[int]) -> np.ndarray:
        if len(r) == 1:  # baseline 0, std 1
            return r / (1 + eps)
        return (r - r.mean()) / (std(r, ddof) + eps)

    return per_group(rule, rewards, group_ids)


def dr_grpo(rewards: Sequence[float], group_ids: Sequence[Any]) -> np.ndarray:
    return per_group(lambda r, _: r - (r.mean() if len(r) > 1 else 0.0), rewards, group_ids)


def rloo(rewards: Sequence[float], group_ids: Sequence[Any]) -> np.ndarray:
    def rule(r: np.ndarray, _: list[int]) -> np.ndarray:
        if len(r) == 1:
            return r.copy()
        return np.array([r[i] - (r.sum() - r[i]) / (len(r) - 1) for i in range(len(r))])

    return per_group(rule, rewards, group_ids)


def batch_scale(values: np.ndarray, ddof: int, eps: float) -> np.ndarray:
    return values / (std(values, ddof) + eps)


def reinforce_plus_plus_baseline(rewards: Sequence[float], group_ids: Sequence[Any], eps: float = 1e-6) -> np.ndarray:
    return batch_scale(dr_grpo(rewards, group_ids), 0, eps)


def grpo_batch_std(rewards: Sequence[float], group_ids: Sequence[Any], eps: float = 1e-6) -> np.ndarray:
    return dr_grpo(rewards, group_ids) / (std(np.asarray(rewards, dtype=np.float64), 0) + eps)


def grpo_passk(rewards: Sequence[float], group_ids: Sequence[Any], eps: float = 1e-6) -> np.ndarray:
    def rule(r: np.ndarray, _: list[int]) -> np.ndarray:
        ranked = sorted(r, reverse=True)
        out = np.zeros(len(r))
        if ranked[0] > ranked[1]:
            out[int(np.argmax(r))] = (ranked[0] - ranked[1]) / (std(r, 0) + eps)
        return out

    return per_group(rule, rewards, group_ids)


def opo(rewards: Sequence[float], group_ids: Sequence[Any], lengths: Sequence[float]) -> np.ndarray:
    def rule(r: np.ndarray, positions: list[int]) -> np.ndarray:
        if len(r) == 1:
            return r.copy()
        weights = [lengths[p] for p in positions]
        baseline = sum(w * x for w, x in zip(weights, r, strict=True)) / sum(weights)
        return r - baseline

    return per_group(rule, rewards, group_ids)


def gpg(rewards: Sequence[float], group_ids: Sequence[Any]) -> np.ndarray:
    alpha = len(rewards) / max(1, sum(1 for r in rewards if r != 0))
    return alpha * dr_grpo(rewards, group_ids)


def maxrl(rewards: Sequence[float], group_ids: Sequence[Any], eps: float = 1e-6) -> np.ndarray:
    return per_group(lambda r, _: (r - r.mean()) / (r.mean() + eps), rewards, group_ids)


def discounted(rows: Sequence[Sequence[float]], factor: float) -> list[list[float]]:
    out = []
    for row in rows:
        running, backwards = 0.0, []
        for value in reversed(row):
            running = value + factor * running
            backwards.append(running)
        out.append(backwards[::-1])
    return out
