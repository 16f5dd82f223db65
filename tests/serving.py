"""Starting ``rllm serve`` as a subprocess on a free port of 127.0.0.1, for the tests that talk to it over HTTP."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from vllm_launcher import free_port

TINY_TEXT = ("rllm.transformers.model=tiny", "rllm.transformers.tokenizer=text", "rllm.transformers.device=cpu")
STARTUP_SECONDS = 60
SERVED = ("rllm.transformers.model=tiny", "rllm.transformers.device=cpu")
"""The trainer's model (tiny, the digit tokenizer, seed 0): a server started with it has the same weights."""
SERVED_RUN = (
    "rllm.backend=transformers",
    *SERVED,
    "rllm.transformers.lr=0.01",
    "rllm.data.train_batch_size=16",
    "rllm.rollout.n=8",
    "rllm.trainer.logger=[jsonl]",
)
"""A training run whose rollouts a server of :data:`SERVED` can give (add its base URL)."""


def served_run(run_dir: Path, *overrides: str) -> list[str]:
    """The command of ``rllm train`` :data:`SERVED_RUN` into ``run_dir`` (add the server's base URL)."""
    train = [sys.executable, "-m", "rllm.cli.main", "train", "--no-progress"]
    return [*train, *SERVED_RUN, f"rllm.trainer.output_dir={run_dir}", *overrides]


def step_versions(run_dir: Path) -> dict[int, set[int]]:
    """Each training step's weight versions as the server reported them in its answers (the run's episode log)."""
    versions: dict[int, set[int]] = {}
    for path in sorted((run_dir / "episodes" / "train").glob("step_*.jsonl")):
        step = int(path.name[len("step_") :].split("-")[0])
        for line in path.read_text().splitlines():
            episode = json.loads(line)
            found = {s["weight_version"] for t in episode["trajectories"] for s in t["steps"]}
            versions.setdefault(step, set()).update(found)
    return versions


def get_json(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.loads(answer.read())  # type: ignore[no-any-return]


def post(
    url: str, data: bytes | None, content_type: str = "application/json", timeout: float = 30
) -> tuple[int, dict[str, Any]]:
    """POST ``data``: the status and the JSON answer, an HTTP error's included."""
    request = urllib.request.Request(url, data=data, headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def post_json(url: str, body: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
    return post(url, None if body is None else json.dumps(body).encode())


def start(*words: str, port: int | None = None, health: str = "/health") -> tuple[subprocess.Popen[bytes], str]:
    """Start ``rllm serve WORDS`` and wait until it answers ``health``; the process and its root URL."""
    port = port or free_port()
    command = [sys.executable, "-m", "rllm.cli.main", "serve", *words, "--host", "127.0.0.1", "--port", str(port)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=os.environ.copy())
    root = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + STARTUP_SECONDS
    while True:
        if process.poll() is not None:
            output = process.stdout.read().decode() if process.stdout else ""
            pytest.fail(f"rllm serve exited with {process.returncode}: {output}")
        try:
            get_json(f"{root}{health}")
            return process, root
        except OSError:
            if time.monotonic() > deadline:
                stop(process)
                pytest.fail(f"rllm serve did not answer {health} within {STARTUP_SECONDS}s")
            time.sleep(0.3)


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


@contextmanager
def running(*words: str, health: str = "/health") -> Iterator[str]:
    """``rllm serve WORDS`` for the ``with`` block: its root URL; stopped whatever the block did."""
    process, root = start(*words, health=health)
    try:
        yield root
    finally:
        stop(process)
