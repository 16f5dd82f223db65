"""``rllm.backend=tinker`` through ``rllm serve --tinker`` against the in-process transformers backend: tokens/s.

``python bench/tinker_backend.py`` (needs ``pip install 'rllm[tinker]'``; ``--steps N``). The
same run twice, for each model: the built-in digit task on the tiny digit model (width 64,
2 layers) and on wider ones (``--wider``: width x layers, 128x4, 512x8 and 1024x12 by default; none given
leaves them out), where the model's compute is no longer negligible beside the calls; seed 0, 20 tasks x 8 rollouts
per step, lr 3e-3, no validation, once with ``rllm.backend=transformers`` (sampling and the update
in the trainer's process) and once with ``rllm.backend=tinker`` against a ``rllm serve --tinker``
subprocess on 127.0.0.1 serving the same model (every sample, ``forward_backward``,
``optim_step`` and sampler save an HTTP round trip through the official SDK), the two runs taking
turns ``--repeats`` times (the median of each side's rates is printed). Rates are
wall-clock, from the metrics' ``wall_time`` between the second and the last step (the first
warms up): trained tokens (``actor/tokens``) per second and steps per second, beside the mean time of a
step's sampling, update and weights (the trainer's ``time/generate``, ``time/update``,
``time/weight_sync``); the ratio printed
is the transformers backend's tokens/s over the tinker backend's (the client direction's
overhead; the issue's goal: at most 1.5). To measure another checkout of rllm (an older commit),
run this file with ``PYTHONPATH`` naming that checkout's ``core`` and ``plugins/*`` folders: the
runs and the server are subprocesses that inherit it.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import NamedTuple

COMMON = (
    "rllm.data.train_batch_size=20",
    "rllm.rollout.n=8",
    "rllm.trainer.logger=[jsonl]",
    "rllm.trainer.val_before_train=false",
    "rllm.trainer.test_freq=0",
    "rllm.trainer.save_freq=0",
)
TRANSFORMERS = ("rllm.backend=transformers", "rllm.transformers.device=cpu", "rllm.transformers.lr=0.003")
GOAL = 1.5


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _server(port: int, model: tuple[str, ...]) -> subprocess.Popen[bytes]:
    words = ["--tinker", "rllm.transformers.model=tiny", "rllm.transformers.device=cpu", *model]
    words += ["--served-model-name", "tiny"]
    command = [sys.executable, "-m", "rllm.cli.main", "serve", *words, "--host", "127.0.0.1", "--port", str(port)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/healthz", timeout=2).read()
            return process
        except OSError:
            time.sleep(0.3)
    process.terminate()
    raise SystemExit("rllm serve --tinker did not answer /api/v1/healthz within 60 s")


PARTS = (("time/generate", "sampling"), ("time/update", "update"), ("time/weight_sync", "weights"))
"""Where a step's time goes (the trainer's own timers), printed as each run's mean over the timed steps."""


class Rate(NamedTuple):
    tokens: float
    steps: float
    parts: dict[str, float]

    def line(self) -> str:
        parts = ", ".join(f"{name} {self.parts[name] * 1000:.0f} ms" for _, name in PARTS)
        return f"{self.tokens:.0f} tokens/s, {self.steps:.3f} steps/s (a step: {parts})"


def _rate(run_dir: Path, words: tuple[str, ...], steps: int) -> Rate:
    """Tokens and steps per second of one ``rllm train`` run, between its second and last step, and the mean time
    of each part of those steps."""
    env = {**os.environ, "TINKER_API_KEY": os.environ.get("TINKER_API_KEY", "tml-bench")}
    command = [sys.executable, "-m", "rllm.cli.main", "train", *words, *COMMON]
    command += [f"rllm.trainer.total_batches={steps}", f"rllm.trainer.output_dir={run_dir}"]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    if done.returncode != 0:
        raise SystemExit(done.stderr[-2000:])
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    steps_run = [r for r in map(json.loads, lines) if r["kind"] == "train"]
    elapsed = steps_run[-1]["wall_time"] - steps_run[1]["wall_time"]
    tokens = sum(r["actor/tokens"] for r in steps_run[2:])
    timed = steps_run[2:]
    parts = {name: sum(r.get(key, 0.0) for r in timed) / len(timed) for key, name in PARTS}
    return Rate(tokens / elapsed, (len(steps_run) - 2) / elapsed, parts)


def _model(hidden: int, layers: int) -> tuple[str, ...]:
    return (f"rllm.transformers.hidden_size={hidden}", f"rllm.transformers.num_layers={layers}")


def _compare(scratch: Path, model: tuple[str, ...], steps: int, repeats: int) -> tuple[Rate, Rate]:
    """The in-process run's and the tinker run's rates (against a server of the same model), taking turns
    ``repeats`` times so that a change in the machine's load falls on both; each side's median run by tokens/s."""
    port = _port()
    server = _server(port, model)
    tinker = (
        "rllm.backend=tinker",
        f"rllm.tinker.base_url=http://127.0.0.1:{port}",
        "rllm.tinker.base_model=tiny",
        "rllm.tinker.lr=0.003",
    )
    local: list[Rate] = []
    remote: list[Rate] = []
    try:
        for turn in range(repeats):
            local.append(_rate(scratch / f"transformers-{turn}", (*TRANSFORMERS, *model), steps))
            remote.append(_rate(scratch / f"tinker-{turn}", tinker, steps))
    finally:
        server.terminate()
        server.wait(timeout=10)
    return _median(local), _median(remote)


def _median(rates: list[Rate]) -> Rate:
    return sorted(rates, key=lambda rate: rate.tokens)[len(rates) // 2]


def _size(text: str) -> tuple[int, int]:
    """``WIDTHxLAYERS`` as two numbers."""
    width, _, layers = text.partition("x")
    if not (width.isdigit() and layers.isdigit()):
        raise argparse.ArgumentTypeError(f"{text!r}: give a model size as WIDTHxLAYERS, e.g. 512x8")
    return int(width), int(layers)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=1, help="turns each side takes (the median is printed)")
    parser.add_argument(
        "--wider",
        type=_size,
        nargs="*",
        default=[(128, 4), (512, 8), (1024, 12)],
        metavar="WIDTHxLAYERS",
        help="wider models to run after the tiny one (default: 128x4 512x8 1024x12; none: the tiny one only)",
    )
    args = parser.parse_args()
    models = [("tiny (width 64, 2 layers)", _model(64, 2))]
    models += [(f"wider (width {width}, {layers} layers)", _model(width, layers)) for width, layers in args.wider]
    for name, model in models:
        with tempfile.TemporaryDirectory() as scratch:
            local, remote = _compare(Path(scratch), model, args.steps, args.repeats)
        ratio = local.tokens / remote.tokens
        verdict = "met" if ratio <= GOAL else "not met"
        print(f"{name}:")
        print(f"  transformers backend (in process): {local.line()}")
        print(f"  tinker backend via rllm serve --tinker: {remote.line()}")
        print(f"  ratio (transformers / tinker, tokens/s): {ratio:.2f}x (goal <= {GOAL}x: {verdict})", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
