"""The pytest plugin (``pytest11`` entry point ``rllm``): fixtures for testing rllm plugins."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture
def rllm_episodes() -> list[Any]:
    """Sample episodes for a grouping hook: three tasks (one id with ':'), two roles, four rollouts each."""
    from rllm.testing.trainer import sample_episodes

    return sample_episodes()


@pytest.fixture
def rllm_config(tmp_path: Path) -> Callable[..., Any]:
    """``rllm_config("key=value", ...)``: the default run config, writing into ``tmp_path``, JSONL logs only."""
    from rllm.config import load_config

    def make(*overrides: str) -> Any:
        return load_config(
            overrides=[
                f"rllm.trainer.output_dir={tmp_path / 'run'}",
                "rllm.trainer.logger=[jsonl]",
                f"rllm.episode_logging.episode_log_dir={tmp_path / 'episodes'}",
                *overrides,
            ]
        )

    return make


@pytest.fixture
def rllm_check_backend(tmp_path: Path) -> Callable[..., None]:
    """``rllm_check_backend(name, overrides=..., trainer_args=...)``: the two-step stage-contract run."""
    from rllm.testing.trainer import check_backend

    return lambda name, **kwargs: check_backend(name, tmp_path, **kwargs)
