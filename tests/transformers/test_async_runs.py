"""Asynchronous training on the transformers backend: staleness 0 is the synchronous run, staleness 1 still learns,
and a run killed mid-way resumes without losing or repeating an episode."""

from __future__ import annotations

from pathlib import Path

import pytest
from extras import skip_module_without

skip_module_without("torch", "transformers", "safetensors", install="pip install 'rllm[transformers]' (CI does)")

from rllm.trainer import UnifiedTrainer
from rllm.trainer.logging import METRICS_FILE, read_metrics

pytestmark = pytest.mark.slow
STALE = (
    "rllm.async_training.enable=true",
    "rllm.async_training.staleness_threshold=1",
    "rllm.algorithm.rollout_correction.tis_mode=token",
)


def _fit(config, **kwargs) -> list[dict]:
    trainer = UnifiedTrainer(None, config, progress=False, **kwargs)
    try:
        trainer.fit()
    finally:
        trainer.shutdown()
    return read_metrics(Path(str(config.rllm.trainer.output_dir)) / METRICS_FILE)


def _numbers(records: list[dict]) -> list[dict]:
    """What a run computed: every metric but the clocks and the asynchronous run's own."""
    return [
        {k: v for k, v in r.items() if k != "wall_time" and not k.startswith(("time/", "perf/", "async/"))}
        for r in records
    ]


def test_staleness_0_gives_exactly_the_synchronous_runs_metrics(tiny_config, tmp_path: Path) -> None:
    shared = ("rllm.trainer.total_batches=4", "rllm.trainer.test_freq=2", "rllm.trainer.save_freq=3")
    sync = _fit(tiny_config(*shared, f"rllm.trainer.output_dir={tmp_path / 'sync'}"))
    overlapped = _fit(
        tiny_config(*shared, "rllm.async_training.enable=true", f"rllm.trainer.output_dir={tmp_path / 'async'}")
    )
    assert [r["kind"] for r in sync] == ["train", "train", "val", "train", "train", "val"]
    assert _numbers(overlapped) == _numbers(sync)
    trained = [r for r in overlapped if r["kind"] == "train"]
    assert [r["async/staleness/max"] for r in trained] == [0.0] * 4
    assert [r["async/staleness/count_0"] for r in trained] == [16.0] * 4  # 4 tasks x 4 rollouts, all on-policy
