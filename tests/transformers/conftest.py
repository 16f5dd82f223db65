"""The transformers backend's tests need torch, transformers and safetensors (``pip install 'rllm[transformers]'``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from omegaconf import DictConfig

SMALL = (
    "rllm.backend=transformers",
    "rllm.transformers.device=cpu",
    "rllm.trainer.logger=[jsonl]",
    "rllm.data.train_batch_size=4",
    "rllm.rollout.n=4",
    "rllm.trainer.total_batches=2",
    "rllm.trainer.test_freq=0",
    "rllm.trainer.val_before_train=false",
)
"""Two steps of 4 tasks x 4 rollouts, no validation: about a second."""


@pytest.fixture
def tiny_config(tmp_path: Path) -> Callable[..., DictConfig]:
    from rllm.config import load_config

    def make(*overrides: str, small: bool = True) -> DictConfig:
        base = [*(SMALL if small else ()), f"rllm.trainer.output_dir={tmp_path / 'run'}"]
        return load_config(overrides=[*base, *overrides])

    return make


@pytest.fixture(scope="session")
def warm_start(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A short warm start (30 steps): it replies in the task's format and ends its turn, answers mostly wrong."""
    from rllm_transformers.warm_start import build_warm_start

    out = tmp_path_factory.mktemp("warm") / "model"
    build_warm_start(out, steps=30)
    return out
