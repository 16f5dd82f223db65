"""Small configurations that train in well under a second on the embedded backend."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from omegaconf import DictConfig

from rllm.config import load_config
from rllm.experimental.unified_trainer import UnifiedTrainer

MakeConfig = Callable[..., DictConfig]
Train = Callable[..., tuple[UnifiedTrainer, list[dict]]]


@pytest.fixture
def make_config(tmp_path: Path) -> MakeConfig:
    """``make_config("key=value", ...)``: defaults with output in ``tmp_path``, JSONL only, no progress noise."""

    def make(*overrides: str) -> DictConfig:
        base = [
            f"rllm.trainer.output_dir={tmp_path / 'run'}",
            "rllm.trainer.logger=[jsonl]",
            f"rllm.episode_logging.episode_log_dir={tmp_path / 'episodes'}",
        ]
        return load_config(overrides=[*base, *overrides])

    return make
