"""Asynchronous training on the transformers backend: staleness 0 is the synchronous run, staleness 1 still learns,
and a run killed mid-way resumes without losing or repeating an episode."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from extras import skip_module_without

skip_module_without("torch", "transformers", "safetensors", install="pip install 'rllm[transformers]' (CI does)")

from rllm.trainer import UnifiedTrainer
from rllm.trainer.logging import METRICS_FILE, read_metrics

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
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


SAMPLER_GAP = "actor/rollout_logprob_diff"
"""The sampler's log-probs against the trainer's: rounding (1e-8) that depends on which thread sampled them."""


def _numbers(records: list[dict]) -> list[dict]:
    """What a run computed: every metric but the clocks, the asynchronous run's own and the sampler's rounding."""
    return [
        {
            k: v
            for k, v in r.items()
            if k not in ("wall_time", SAMPLER_GAP) and not k.startswith(("time/", "perf/", "async/"))
        }
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
    assert all(r[SAMPLER_GAP] < 1e-6 for r in trained)  # the same weights sampled: a gap of rounding only
    assert [r["rollout/staleness/max"] for r in trained] == [0.0] * 4
    assert [r["rollout/staleness/count_0"] for r in trained] == [16.0] * 4  # 4 tasks x 4 rollouts, all on-policy


def test_staleness_1_with_a_slow_environment_still_learns_the_default_task(tiny_config, tmp_path: Path) -> None:
    """The benchmark's workflow (50 ms of environment per turn), the default batch, 40 steps one version behind."""
    sys.path.insert(0, str(REPO / "bench"))
    from async_training import SlowEnvironmentWorkflow

    config = tiny_config(
        *STALE,
        "rllm.backend=transformers",
        "rllm.transformers.device=cpu",
        "rllm.trainer.total_batches=50",
        "rllm.trainer.test_freq=10",
        "rllm.transformers.lr=0.002",
        f"rllm.trainer.output_dir={tmp_path / 'run'}",
        small=False,
    )
    records = _fit(config, workflow_class=SlowEnvironmentWorkflow)
    trained = [r for r in records if r["kind"] == "train"]
    # each batch samples the weights of two steps before its own: one version behind, except the first
    assert [r["rollout/staleness/max"] for r in trained] == [0.0] + [1.0] * 49
    assert [r["rollout/staleness/count_1"] for r in trained[1:]] == [160.0] * 49  # 20 tasks x 8 rollouts
    # the synchronous run of these settings ends at 0.89 (its last 20 steps on one wrong digit for the small pairs)
    assert [r["val/digit_max/pass@1"] for r in records if r["kind"] == "val"][-1] >= 0.8


RECORDING = '''
import json, os, sys
from rllm.config import load_config
from rllm.trainer import UnifiedTrainer
from rllm_transformers.backend import TransformersBackend

RECORD = sys.argv[1]


class Recording(TransformersBackend):
    """Appends the ids of the episodes each update trained on, durably, before the step goes on."""

    async def update_policy(self, trainer_state):
        await super().update_policy(trainer_state)
        ids = [f"{trainer_state.epoch}/{episode.id}" for episode in trainer_state.episodes]
        with open(RECORD, "a") as out:
            out.write(json.dumps({"step": trainer_state.global_step, "ids": ids}) + "\\n")
            out.flush()
            os.fsync(out.fileno())


trainer = UnifiedTrainer(Recording, load_config(overrides=sys.argv[2:]), progress=False)
try:
    trainer.fit()
finally:
    trainer.shutdown()
'''
KILLED = (
    *STALE,
    "rllm.backend=transformers",
    "rllm.transformers.device=cpu",
    "rllm.trainer.logger=[jsonl]",
    "rllm.data.train_batch_size=20",
    "rllm.rollout.n=4",
    "rllm.trainer.total_batches=15",  # 3 epochs of the 100 digit_max tasks
    "rllm.trainer.save_freq=1",
    "rllm.trainer.test_freq=0",
    "rllm.trainer.val_before_train=false",
)


def _holds_a_batch(path: Path) -> bool:
    """Whether a checkpoint's policy.json lists a batch sampled ahead (False while it is being pruned)."""
    try:
        return bool(json.loads(path.read_text())["pending"])
    except (OSError, ValueError):
        return False


def _trained(record: Path) -> list[dict]:
    return [json.loads(line) for line in record.read_text().splitlines()]


def test_a_sigkilled_run_resumes_without_losing_or_repeating_an_episode(tmp_path: Path) -> None:
    """Killed right after a checkpoint that holds a batch sampled and not yet trained; resumed to the end."""
    from rllm.tasks import build_tasks

    script, run_dir = tmp_path / "run.py", tmp_path / "run"
    script.write_text(RECORDING)
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    command = [sys.executable, str(script)]
    overrides = [*KILLED, f"rllm.trainer.output_dir={run_dir}"]
    run = subprocess.Popen([*command, str(first), *overrides], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 240
    while run.poll() is None and time.monotonic() < deadline:
        if any(_holds_a_batch(path) for path in run_dir.glob("checkpoints/step_*/policy.json")):
            run.send_signal(signal.SIGKILL)
            break
        time.sleep(0.005)
    run.wait()
    assert run.returncode == -signal.SIGKILL, "the run ended before a checkpoint held a sampled, untrained batch"
    intact = [int(path.parent.name.split("_")[1]) for path in run_dir.glob("checkpoints/step_*/MANIFEST.json")]
    resumed_from = max(intact)  # what resuming takes: the newest checkpoint written whole
    pending = json.loads((run_dir / "checkpoints" / f"step_{resumed_from}" / "policy.json").read_text())["pending"]
    assert pending and resumed_from < 15
    done = subprocess.run([*command, str(second), *overrides], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    again = _trained(second)
    assert again[0]["step"] == resumed_from + 1 and again[-1]["step"] == 15
    kept = [r for r in _trained(first) if r["step"] <= resumed_from]  # later updates died with the process
    assert [r["step"] for r in kept + again] == list(range(1, 16))
    trained = [uid for r in kept + again for uid in r["ids"]]
    tasks = [task["uid"] for task in build_tasks(["digit_max"])]
    expected = {f"{epoch}/{uid}:{k}" for epoch in range(3) for uid in tasks for k in range(4)}
    assert len(tasks) == 100 and len(trained) == len(set(trained)) == 1200  # none trained twice
    assert set(trained) == expected  # none lost
    resumed = [
        r for r in read_metrics(run_dir / METRICS_FILE) if r["kind"] == "train" and r["step"] == resumed_from + 1
    ]
    assert resumed[-1]["time/generate"] == pending[0]["seconds"]  # the checkpoint's batch trained, not sampled again
