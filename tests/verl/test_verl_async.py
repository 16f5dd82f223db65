"""``rllm.backend=verl`` with ``rllm.async_training.enable``: verl's worker runs stages 4-7 on the trainer's update
thread while the in-process engine samples the next batch from its own copy of the weights.

One process (asynchronous training refuses torchrun), so the worker's gloo group has one rank; the step loop waits
for each update before the next, and saves after it, so the worker is never called from two threads at once.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from extras import skip_module_without

skip_module_without("torch", "transformers", "safetensors", install="pip install 'rllm[verl,transformers]' (CI does)")

from serving import step_versions
from test_verl_backend import ENV, _records

pytestmark = pytest.mark.slow

RUN = (
    "rllm.data.train_batch_size=8",
    "rllm.rollout.n=4",
    "rllm.verl.num_threads=1",
    "rllm.episode_logging.log_episodes=true",
)
GAP = "actor/rollout_logprob_diff"
"""The sampler's log-probs against the worker's: rounding (about 7e-8) that depends on which thread sampled them."""


def _train(run_dir: Path, *overrides: str) -> list[dict[str, Any]]:
    command = [sys.executable, "-m", "rllm.cli.main", "train", "--no-progress", "rllm.backend=verl"]
    command += ["rllm.trainer.logger=[jsonl]", f"rllm.trainer.output_dir={run_dir}", *RUN, *overrides]
    done = subprocess.run(command, capture_output=True, text=True, env=ENV, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return _records(run_dir, "train") + _records(run_dir, "val")


def _numbers(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What a run computed: every metric but the clocks, the asynchronous run's own and the sampler's rounding."""
    skipped = ("time/", "perf/", "async/", "wall_time", GAP)
    return [{k: v for k, v in r.items() if not k.startswith(skipped)} for r in records]


def test_staleness_0_gives_exactly_the_synchronous_runs_metrics(tmp_path: Path) -> None:
    """Staleness 0: each batch samples the weights of every update before it, as a synchronous run does, so the update
    thread and the copy change no number (validation after steps 2 and 4, a checkpoint after step 3)."""
    shared = ("rllm.trainer.total_batches=4", "rllm.trainer.test_freq=2", "rllm.trainer.save_freq=3")
    sync = _train(tmp_path / "sync", *shared)
    overlapped = _train(tmp_path / "async", *shared, "rllm.async_training.enable=true")
    assert [r["kind"] for r in sync] == ["train"] * 4 + ["val"] * 3  # before training, after steps 2 and 4
    assert _numbers(overlapped) == _numbers(sync)
    trained = [r for r in overlapped if r["kind"] == "train"]
    assert all(r[GAP] < 1e-6 for r in trained)  # the copy holds the worker's weights: a gap of rounding only
    assert [r["rollout/staleness/max"] for r in trained] == [0.0] * 4
    assert any(r["actor/grad_norm"] > 0 for r in trained)  # the updates moved the policy, so equality says something
    assert step_versions(tmp_path / "async") == {u: {u - 1} for u in range(1, 5)}


def test_staleness_1_samples_one_version_behind_while_the_worker_updates(tmp_path: Path) -> None:
    """Staleness 1: batch u is sampled while step u - 1 trains, from version u - 2 (the first two from the initial
    weights), and the off-policy update is corrected on verl's worker by the truncated importance weights of the
    worker's old log-probs over the sampler's (a stale sampler: a gap far above rounding)."""
    overlapped = _train(
        tmp_path,
        "rllm.trainer.total_batches=5",
        "rllm.trainer.test_freq=0",
        "rllm.async_training.enable=true",
        "rllm.async_training.staleness_threshold=1",
        "rllm.algorithm.rollout_correction.tis_mode=token",
    )
    assert step_versions(tmp_path) == {u: {max(0, u - 2)} for u in range(1, 6)}
    trained = [r for r in overlapped if r["kind"] == "train"]
    assert [r["rollout/staleness/max"] for r in trained] == [0.0] + [1.0] * 4
    assert trained[0][GAP] < 1e-6 and all(r[GAP] > 1e-4 for r in trained[1:]), [r[GAP] for r in trained]
