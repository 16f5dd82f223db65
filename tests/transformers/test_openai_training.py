"""``rllm train`` with rollouts from a separate ``rllm serve`` process and weight sync after every step.

The served run is compared with the in-process engine's under the same settings: each episode's
first request is seeded with the episode's seed, so the server draws what the in-process engine
draws. Killing the server mid-run follows ``rllm.workflow.failure_policy``; a server that restarts
(on its initial weights) is given the current ones before the run samples from it again.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from extras import skip_module_without
from serving import SERVED, free_port, get_json, running, served_run, start, stop

skip_module_without("torch", "transformers", "safetensors", "fastapi", "uvicorn", install="pip install 'rllm[serve]'")

pytestmark = pytest.mark.slow


def _records(run_dir: Path, kind: str) -> list[dict[str, Any]]:
    path = run_dir / "metrics.jsonl"
    lines = path.read_text().splitlines() if path.is_file() else []
    return [r for r in (json.loads(line) for line in lines if line.endswith("}")) if r["kind"] == kind]


def _served(url: str, *extra: str) -> tuple[str, ...]:
    return (f"rllm.rollout.openai.base_url=[{url}]", *extra)


def test_served_rollouts_train_as_the_in_process_engine(tmp_path: Path) -> None:
    steps = ("rllm.trainer.total_batches=12", "rllm.trainer.test_freq=12")
    local = subprocess.run(served_run(tmp_path / "local", *steps), capture_output=True, text=True, timeout=300)
    assert local.returncode == 0, local.stderr
    with running(*SERVED) as root:
        served = subprocess.run(
            served_run(tmp_path / "served", *steps, *_served(f"{root}/v1")), capture_output=True, text=True, timeout=300
        )
        assert served.returncode == 0, served.stderr
        assert get_json(f"{root}/health")["weight_version"] == 12  # the first weights, then one update per step
    pass_local = [r["val/digit_max/pass@1"] for r in _records(tmp_path / "local", "val")]
    pass_served = [r["val/digit_max/pass@1"] for r in _records(tmp_path / "served", "val")]
    assert len(pass_local) == len(pass_served) == 2 and pass_local[0] == pass_served[0]  # the same first weights
    assert pass_local[-1] > pass_local[0] + 0.2  # it learned, so the comparison says something
    assert abs(pass_served[-1] - pass_local[-1]) <= 0.05, (pass_local, pass_served)
    train_local, train_served = _records(tmp_path / "local", "train"), _records(tmp_path / "served", "train")
    assert train_served[0]["reward/solver/mean"] == train_local[0]["reward/solver/mean"]  # the same first samples
    assert all(r["rollout/stale_steps"] == 0 and r["rollout/staleness/max"] == 0 for r in train_served)
    assert all("time/weight_sync" in r for r in train_served)


def _wait_for_step(run_dir: Path, step: int, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 120
    while not any(r["step"] >= step for r in _records(run_dir, "train")):
        assert process.poll() is None, process.communicate()[1]
        assert time.monotonic() < deadline, "the run made no progress"
        time.sleep(0.05)


def test_a_killed_server_under_failure_policy_fail_stops_the_run_naming_it(tmp_path: Path) -> None:
    server, root = start(*SERVED)
    try:
        run = served_run(
            tmp_path,
            "rllm.trainer.total_batches=60",  # within the epochs: a longer cap would add a warning line
            "rllm.trainer.test_freq=0",
            "rllm.trainer.val_before_train=false",
            "rllm.workflow.failure_policy=fail",
            *_served(f"{root}/v1", "rllm.rollout.openai.max_retries=1", "rllm.rollout.openai.retry_backoff=0.1"),
        )
        process = subprocess.Popen(run, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        _wait_for_step(tmp_path, 2, process)
        server.send_signal(signal.SIGKILL)
        _, err = process.communicate(timeout=120)
    finally:
        stop(server)
    lines = err.strip().splitlines()
    assert process.returncode == 2 and len(lines) == 1, err
    assert f"{root}/v1/completions: no answer (" in lines[0] and "after 2 attempts; start the server" in lines[0]
    assert "rllm.rollout.openai.base_url. Fix the workflow" in lines[0]
    assert max(r["step"] for r in _records(tmp_path, "train")) < 60


def test_a_restarted_server_gets_the_current_weights_before_it_samples(tmp_path: Path) -> None:
    port = free_port()
    server, root = start(*SERVED, port=port)
    first_start = get_json(f"{root}/health")["start_id"]
    try:
        run = served_run(
            tmp_path,
            "rllm.trainer.total_batches=5",
            "rllm.trainer.test_freq=0",
            "rllm.trainer.val_before_train=false",
            "rllm.workflow.failure_policy=retry",
            *_served(f"{root}/v1", "rllm.rollout.openai.max_retries=7", "rllm.rollout.openai.retry_backoff=0.25"),
        )
        process = subprocess.Popen(run, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        _wait_for_step(tmp_path, 2, process)
        server.send_signal(signal.SIGKILL)
        server.wait(timeout=10)
        server, _ = start(*SERVED, port=port)  # back with its first weights, version 0
        restarted = get_json(f"{root}/health")
        _, err = process.communicate(timeout=180)
        final = get_json(f"{root}/health")
    finally:
        stop(server)
    assert process.returncode == 0, err
    # the trainer may re-send the weights before this test reads the health route: the log line below is the proof
    # that the server came back with its first weights (version 0) and was brought up to date
    assert restarted["start_id"] != first_start
    assert final["start_id"] == restarted["start_id"] and final["weight_version"] == 5  # one update per step
    assert re.search(rf"{root}/v1 lost the policy's weights \(weight_version 0 where [2-5] was expected", err), err
    records = _records(tmp_path, "train")
    assert [r["step"] for r in records] == list(range(1, 6))
    # no step sampled the restarted server's initial weights: every one carries the version trained, and its
    # rollout log-probs are the trainer's own forward pass of the sampled ids
    assert all(r["rollout/stale_steps"] == 0 and r["rollout/staleness/max"] == 0 for r in records), records
    assert all(r["actor/rollout_logprob_diff"] <= 1e-5 for r in records), [
        r["actor/rollout_logprob_diff"] for r in records
    ]


def test_a_server_refusing_the_weights_stops_the_run_before_any_step(tmp_path: Path) -> None:
    with running(*SERVED, "rllm.transformers.hidden_size=32") as root:  # same tokenizer, another shape
        done = subprocess.run(
            served_run(tmp_path, "rllm.trainer.total_batches=3", *_served(f"{root}/v1")),
            capture_output=True,
            text=True,
            timeout=300,
        )
    lines = done.stderr.strip().splitlines()
    assert done.returncode != 0 and len(lines) == 1, done.stderr
    assert f"Weight update 0 was refused by {root}/update_weights_from_disk (HTTP 400: " in lines[0]
    assert "another shape" in lines[0] and "stops before training on stale weights" in lines[0]
    assert _records(tmp_path, "train") == []
