"""Resuming refuses checkpoints of other settings and ignores what a crash left half-written.

Killed processes resuming to the same result are probed in tests/reliability/test_trainer_runs.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rllm.errors import CheckpointError
from rllm.experimental.unified_trainer import UnifiedTrainer
from rllm.trainer.logging import METRICS_FILE, read_metrics


def _train_steps(run_dir: Path) -> list[int]:
    return [r["step"] for r in read_metrics(run_dir / METRICS_FILE) if r["kind"] == "train"]


def test_checkpoint_of_other_settings_is_refused(make_config) -> None:
    trainer = UnifiedTrainer(None, make_config("rllm.trainer.total_batches=2"), progress=False)
    trainer.fit()
    trainer.shutdown()
    other = UnifiedTrainer(
        None, make_config("rllm.trainer.total_batches=2", "rllm.algorithm.adv_estimator=rloo"), progress=False
    )
    with pytest.raises(CheckpointError, match=r"estimator: 'grpo' then, 'rloo' now.*resume_mode=disable"):
        other.fit()
    other.shutdown()


def test_torn_checkpoint_and_torn_metrics_line_are_ignored(make_config, tmp_path: Path) -> None:
    trainer = UnifiedTrainer(
        None, make_config("rllm.trainer.total_batches=4", "rllm.trainer.save_freq=2"), progress=False
    )
    trainer.fit()
    trainer.shutdown()
    run_dir = trainer.output_dir
    # a crash while writing step 6: a half-made checkpoint directory and half a metrics line
    (run_dir / "checkpoints" / ".step_6.partial-1").mkdir()
    (run_dir / "checkpoints" / ".latest.k2j3.tmp").write_text("step_")
    (run_dir / ".metrics.jsonl.x8a1.tmp").write_text('{"kind": "tr')
    with (run_dir / METRICS_FILE).open("a") as handle:
        handle.write(json.dumps({"kind": "train", "step": 5})[:10])
    longer = UnifiedTrainer(
        None, make_config("rllm.trainer.total_batches=6", "rllm.trainer.save_freq=2"), progress=False
    )
    longer.fit()
    longer.shutdown()
    assert _train_steps(run_dir) == [1, 2, 3, 4, 5, 6]
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["latest", "step_2", "step_4", "step_6"]
    assert not (run_dir / ".metrics.jsonl.x8a1.tmp").exists()
