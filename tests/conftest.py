"""Shared fixtures: a private plugin manager so tests that register things leave no trace."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from rllm.plugins import manager as manager_module
from rllm.plugins.discovery import BUILTIN_PLUGIN
from rllm.plugins.manager import PluginManager
from rllm.plugins.registry import Source


@pytest.fixture
def plugin_manager(monkeypatch: pytest.MonkeyPatch) -> Iterator[PluginManager]:
    """A manager holding only the built-in plugin, installed as the process-wide one for the test."""
    from rllm_builtin import plugin as builtin_plugin

    fresh = PluginManager()
    fresh.register(builtin_plugin, Source("builtin", BUILTIN_PLUGIN, "rllm", "test"))
    monkeypatch.setattr(manager_module, "_manager", fresh)
    yield fresh


@pytest.fixture
def train() -> Callable[..., tuple[Any, list[dict[str, Any]]]]:
    """``train(config, *args, **kwargs)``: fit a UnifiedTrainer on ``config``, shut it down; the trainer (its backend
    still holds the model) and the metrics."""
    from rllm.experimental.unified_trainer import UnifiedTrainer
    from rllm.trainer.logging import METRICS_FILE, read_metrics

    def run(config: Any, *args: object, **kwargs: object) -> tuple[Any, list[dict[str, Any]]]:
        trainer = UnifiedTrainer(None, config, *args, progress=False, **kwargs)
        try:
            trainer.fit()
        finally:
            trainer.shutdown()
        return trainer, read_metrics(trainer.output_dir / METRICS_FILE)

    return run
