"""tests/vllm_launcher.py against stand-ins for vLLM's python: a server that exits, one that never answers."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from vllm_launcher import start_vllm

from rllm.errors import InferenceServerError

pytestmark = pytest.mark.slow  # subprocesses


def _python(tmp_path: Path, body: str) -> Path:
    script = tmp_path / "python"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    return script


def _gone(pid: int) -> bool:
    status = Path(f"/proc/{pid}/status")
    return not status.exists() or "\nState:\tZ" in status.read_text()


def test_a_server_that_exits_is_one_line_naming_the_command_and_the_log_tail(tmp_path: Path) -> None:
    python = _python(tmp_path, 'echo loading\necho "no kernel for $*"\nexit 3')
    with pytest.raises(InferenceServerError) as caught:
        start_vllm(python, tmp_path / "model", tmp_path / "vllm.log", startup_seconds=60)
    message = str(caught.value)
    port = re.search(r"--port (\d+) ", message)
    assert port is not None, message
    args = (
        f"-m vllm.entrypoints.openai.api_server --model {tmp_path / 'model'} --host 127.0.0.1 --port {port[1]} "
        "--dtype float32 --gpu-memory-utilization 0.1 --enforce-eager --max-num-batched-tokens 16384"
    )
    log = tmp_path / "vllm.log"
    assert message == f"vLLM exited with code 3: {python} {args} (log {log}: loading | no kernel for {args})"


def test_a_server_that_never_answers_is_stopped_with_its_children(tmp_path: Path) -> None:
    pid_file = tmp_path / "child"
    python = _python(tmp_path, f"sleep 300 &\necho $! > {pid_file}\nwait")
    started = time.monotonic()
    with pytest.raises(InferenceServerError, match=r"^vLLM did not answer /v1/models within 1 s: "):
        start_vllm(python, tmp_path / "model", tmp_path / "vllm.log", startup_seconds=1)
    assert time.monotonic() - started < 30  # not the child's 300 s
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while not _gone(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _gone(child)  # the engine-like child died with the server's group


def test_a_python_that_is_not_there_is_one_line_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "no-venv" / "bin" / "python"
    with pytest.raises(
        InferenceServerError, match=rf"^vLLM could not start: {re.escape(str(missing))} -m vllm\."
    ) as caught:
        start_vllm(missing, tmp_path / "model", tmp_path / "vllm.log")
    assert "\n" not in str(caught.value) and "No such file or directory" in str(caught.value)
