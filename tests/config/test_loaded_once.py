"""A config ``load_config`` produced is checked once: ``rllm train`` loads it, the trainer it builds copies it.

The checks are counted by wrapping :func:`rllm.config.loading.validate_config`, the one function
that checks every value; a config changed after it was loaded, or loaded under other plugins, is
checked again.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

import rllm.config.loading as loading
from rllm import ConfigError, load_config
from rllm.cli.main import main

QUICK = ["rllm.trainer.test_freq=0", "rllm.trainer.val_before_train=false", "rllm.trainer.total_batches=1"]


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """One entry per call of ``validate_config``."""
    calls: list[int] = []
    real = loading.validate_config

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(loading, "validate_config", counted)
    return calls


def test_rllm_train_checks_its_config_once(tmp_path: Path, checks: list[int]) -> None:
    run = tmp_path / "run"
    assert main(["train", "--no-progress", f"rllm.trainer.output_dir={run}", *QUICK]) == 0
    assert (run / "checkpoints" / "step_1").is_dir()  # it trained
    assert len(checks) == 1


def test_the_trainer_copies_a_loaded_config_without_checking_it(tmp_path: Path, checks: list[int]) -> None:
    from rllm.trainer import UnifiedTrainer

    config = load_config(overrides=[f"rllm.trainer.output_dir={tmp_path}", "rllm.algorithm.adv_estimator=rloo"])
    trainer = UnifiedTrainer(None, config, progress=False)
    try:
        assert len(checks) == 1
        assert trainer.config is not config and trainer.config == config
        assert trainer.algorithm_config.estimator == "rloo"
    finally:
        trainer.shutdown()


def test_loading_a_loaded_config_again_gives_an_equal_copy(checks: list[int]) -> None:
    config = load_config(overrides=["rllm.trainer.total_epochs=3"])
    again = load_config(config)
    assert len(checks) == 1
    assert again is not config and again == config
    again.rllm.trainer.total_epochs = 5
    assert config.rllm.trainer.total_epochs == 3


def test_a_loaded_config_changed_after_is_checked_again(checks: list[int]) -> None:
    config = load_config()
    config.rllm.trainer.total_epochs = 0
    with pytest.raises(ConfigError, match="total_epochs"):
        load_config(config)
    assert len(checks) == 2


def test_a_loaded_config_with_overrides_or_other_sources_is_checked_again(checks: list[int]) -> None:
    config = load_config()
    load_config(config, overrides=["rllm.trainer.total_epochs=2"])
    load_config(config, {"rllm": {"trainer": {"total_epochs": 2}}})
    assert len(checks) == 3


def test_a_loaded_config_is_checked_again_under_another_schema(
    checks: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = load_config()
    other = copy.copy(loading.current_schema())  # the same keys, but not the schema it was checked against
    monkeypatch.setattr(loading, "current_schema", lambda: other)
    load_config(config)
    assert len(checks) == 2
