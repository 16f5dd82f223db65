"""A training process killed with SIGKILL resumes from its last checkpoint and ends where an uninterrupted run ends."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rllm.errors import CheckpointError
from rllm.experimental.unified_trainer import UnifiedTrainer
from rllm.trainer.logging import METRICS_FILE, read_metrics

TOTAL = 160
SAVE_FREQ = 7


def _command(run_dir: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "rllm.cli.main",
        "train",
        "--no-progress",
        f"rllm.trainer.output_dir={run_dir}",
        "rllm.trainer.logger=[jsonl]",
        "rllm.data.train_batch_size=5",
        "rllm.trainer.total_epochs=8",
        f"rllm.trainer.save_freq={SAVE_FREQ}",
        "rllm.trainer.test_freq=0",
    ]


def _train_steps(run_dir: Path) -> list[int]:
    return [r["step"] for r in read_metrics(run_dir / METRICS_FILE) if r["kind"] == "train"]


def _rewards(run_dir: Path) -> list[float]:
    return [r["reward/solver/mean"] for r in read_metrics(run_dir / METRICS_FILE) if r["kind"] == "train"]


def test_sigkill_mid_run_then_resume_finishes_the_same_run(tmp_path: Path) -> None:
    killed_dir, clean_dir = tmp_path / "killed", tmp_path / "clean"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(_command(killed_dir), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        steps = _train_steps(killed_dir)
        if steps and steps[-1] >= 3 * SAVE_FREQ + 2:
            break
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert process.returncode == -signal.SIGKILL, process.stderr.read().decode()
    steps_at_kill = _train_steps(killed_dir)
    assert 3 * SAVE_FREQ < steps_at_kill[-1] < TOTAL  # really killed mid-run, past a checkpoint

    resumed = subprocess.run(_command(killed_dir), env=env, capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    checkpoint_step = int(resumed.stderr.split("(step ")[1].split(")")[0])
    assert checkpoint_step % SAVE_FREQ == 0 and checkpoint_step <= steps_at_kill[-1]
    assert _train_steps(killed_dir) == list(range(1, TOTAL + 1))  # nothing lost, nothing duplicated
    assert (killed_dir / "checkpoints" / "latest").read_text() == f"step_{TOTAL}"

    clean = subprocess.run(_command(clean_dir), env=env, capture_output=True, text=True, timeout=120)
    assert clean.returncode == 0, clean.stderr
    assert _train_steps(clean_dir) == _train_steps(killed_dir)
    # policy, sampler and data order are restored exactly: the resumed run retraces the uninterrupted one
    assert _rewards(killed_dir) == _rewards(clean_dir)

    again = subprocess.run(_command(killed_dir), env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and "already complete (160 steps)" in again.stderr
    assert _train_steps(killed_dir) == list(range(1, TOTAL + 1))


def test_checkpoint_of_other_settings_is_refused(make_config) -> None:
    trainer = UnifiedTrainer(None, make_config("rllm.trainer.total_batches=2"), progress=False)
    trainer.fit()
    trainer.shutdown()
    other = UnifiedTrainer(
        None, make_config("rllm.trainer.total_batches=2", "rllm.algorithm.adv_estimator=rloo"), progress=False
    )
    with pytest.raises(CheckpointError, match=r"estimator: \['grpo'\] then, \['rloo'\] now.*resume_mode=disable"):
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
    with (run_dir / METRICS_FILE).open("a") as handle:
        handle.write(json.dumps({"kind": "train", "step": 5})[:10])
    longer = UnifiedTrainer(
        None, make_config("rllm.trainer.total_batches=6", "rllm.trainer.save_freq=2"), progress=False
    )
    longer.fit()
    longer.shutdown()
    assert _train_steps(run_dir) == [1, 2, 3, 4, 5, 6]
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["latest", "step_2", "step_4", "step_6"]
