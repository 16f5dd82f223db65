"""The learning-rate schedule of rLLM's ``lr_schedule`` and warm-up keys, one for every backend.

A backend multiplies its own base learning rate (``rllm.embedded.lr``, ``rllm.transformers.lr``)
by it each step, so the same keys mean the same curve whatever the backend. A formula of its own, not
torch's schedulers: the core does not depend on torch, and the embedded backend trains without it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from rllm.contract.names import LR_SCHEDULES
from rllm.errors import ConfigError

if TYPE_CHECKING:
    from rllm.config.algorithm import AlgorithmConfig

__all__ = ["lr_factor", "scheduled_lr"]


def lr_factor(schedule: str, warmup_ratio: float, step: int, total: int) -> float:
    """Multiplier of the base learning rate at ``step`` (1-based) of ``total``: warmup, then the schedule."""
    total = max(total, 1)
    warmup = int(warmup_ratio * total)
    if warmup and step <= warmup:
        return step / warmup
    progress = (step - warmup) / max(total - warmup, 1)
    if schedule == "constant":
        return 1.0
    if schedule == "linear":
        return max(1.0 - progress, 0.0)
    if schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))
    raise ConfigError(f"rllm.algorithm.lr_schedule={schedule!r} is unknown; use one of {', '.join(LR_SCHEDULES)}.")


def scheduled_lr(base: float, algorithm: AlgorithmConfig, step: int, total: int) -> float:
    """``base`` under the run's ``lr_schedule`` and warm-up settings; ``warmup_steps``, when set, wins over the ratio.

    ``algorithm`` is the run's :class:`~rllm.AlgorithmConfig` (its keys checked when it was built),
    the one a backend receives; a backend never reads the raw config for these keys.
    """
    warmup_steps = int(algorithm.warmup_steps)
    warmup_ratio = warmup_steps / max(total, 1) if warmup_steps >= 0 else float(algorithm.warmup_steps_ratio)
    return base * lr_factor(str(algorithm.lr_schedule), warmup_ratio, step, total)
