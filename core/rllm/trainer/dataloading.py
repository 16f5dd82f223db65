"""Batches of a task list for backends that train on a list of tasks (the built-in ones do).

It reads ``rllm.data`` as every backend should: validation in order, training shuffled per
epoch from ``seed + epoch`` (so a resumed run sees the same order), the training batch
multiplied by rejection sampling's ``multiplier``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
from omegaconf import DictConfig

from rllm.errors import ConfigError
from rllm.trainer.backend_protocol import TrainerState

__all__ = ["TaskLoader", "task_loader"]


class TaskLoader:
    """Batches of a task list; reshuffled per epoch from ``seed + epoch`` so a resumed run sees the same order."""

    def __init__(self, tasks: Sequence[Any], batch_size: int, shuffle: bool, seed: int) -> None:
        self.tasks = list(tasks)
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed

    def __len__(self) -> int:
        return math.ceil(len(self.tasks) / self.batch_size)

    def __iter__(self) -> Iterator[list[Any]]:
        order = np.arange(len(self.tasks))
        if self.shuffle:
            order = np.random.default_rng(self.seed).permutation(len(self.tasks))
        for start in range(0, len(order), self.batch_size):
            yield [self.tasks[i] for i in order[start : start + self.batch_size]]


def task_loader(
    config: DictConfig, backend: str, dataset: Sequence[Any] | None, trainer_state: TrainerState, seed: int
) -> TaskLoader:
    """The batches of ``rllm.data``: validation in order (all at once unless ``val_batch_size``), training
    shuffled per epoch from ``seed + epoch``, ``train_batch_size`` times rejection sampling's multiplier."""
    if dataset is None:
        raise ConfigError(f"The {backend} backend needs a dataset: pass train_dataset/val_dataset or no workflow.")
    data = config.rllm.data
    if trainer_state.validating:
        size = data.val_batch_size
        return TaskLoader(dataset, int(size) if size else len(dataset), shuffle=False, seed=0)
    multiplier = int(config.rllm.rejection_sample.multiplier)
    return TaskLoader(
        dataset, int(data.train_batch_size) * multiplier, shuffle=bool(data.shuffle), seed=seed + trainer_state.epoch
    )
