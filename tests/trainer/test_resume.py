"""Resuming refuses checkpoints of other settings and ignores what a crash left half-written.

Killed processes resuming to the same result are probed in tests/reliability/test_trainer_runs.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from extras import missing

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
    only_the_estimator = r"\(rllm\.algorithm\.adv_estimator: 'grpo' then, 'rloo' now\)\. To start afresh"
    with pytest.raises(CheckpointError, match=only_the_estimator + ".*experiment_name=NEW_NAME.*resume_mode=disable"):
        other.fit()
    other.shutdown()


def test_a_change_of_backend_is_named_once_not_as_both_backends_keys() -> None:
    from rllm.trainer.checkpoint import settings_changed

    then = {"backend": "embedded", "rllm.embedded.lr": 0.5, "rllm.embedded.seed": 0, "rllm.data.shuffle": True}
    now = {"backend": "transformers", "rllm.transformers.lr": 1e-3, "rllm.data.shuffle": False}
    assert settings_changed(then, now) == (
        "rllm.backend: 'embedded' then, 'transformers' now; rllm.data.shuffle: True then, False now"
    )


@pytest.mark.skipif(
    bool(missing("torch", "transformers")), reason="torch not installed: pip install 'rllm[transformers]'"
)
def test_resuming_under_another_backend_names_only_the_backend(make_config) -> None:
    trainer = UnifiedTrainer(
        None, make_config("rllm.trainer.total_batches=1", "rllm.trainer.test_freq=0"), progress=False
    )
    trainer.fit()
    trainer.shutdown()
    config = make_config("rllm.trainer.total_batches=1", "rllm.trainer.test_freq=0", "rllm.backend=transformers")
    other = UnifiedTrainer(None, config, progress=False)
    with pytest.raises(CheckpointError) as refused:
        other.fit()
    other.shutdown()
    message = str(refused.value)
    assert "(rllm.backend: 'embedded' then, 'transformers' now)" in message and len(message) < 400, message


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
