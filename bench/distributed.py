"""The transformers backend on 1 and 2 torchrun ranks (CPU, gloo; DDP and FSDP): training steps per second and scaling.

``python bench/distributed.py`` (needs ``pip install 'rllm[transformers]'``; ``--quick`` for a
few steps); ``python bench/run.py`` runs it too. The same run is trained by ``rllm train`` in one
process and under ``torchrun --nproc_per_node 2``: the same global batch, seed and settings, on
a tiny model widened until the policy update dominates a step (hidden 256, 4 layers, four PPO
epochs over 16 tasks x 8 rollouts). Steps per second come from the trainer's own ``time/step``
(the first step, which warms up, left out); the scaling efficiency is the 2-rank rate over twice
the 1-rank rate (1.0: perfect). Each rank runs one torch thread. On a machine with two cores
shared with other work expect little: the figure says what the ranks cost, not what a GPU node
gains.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

SETTINGS = (
    "rllm.backend=transformers",
    "rllm.transformers.device=cpu",
    "rllm.transformers.num_threads=1",
    "rllm.transformers.hidden_size=256",
    "rllm.transformers.num_layers=4",
    "rllm.transformers.ppo_epochs=4",
    "rllm.data.train_batch_size=16",
    "rllm.rollout.n=8",
    "rllm.trainer.logger=[jsonl]",
    "rllm.trainer.test_freq=0",
    "rllm.trainer.val_before_train=false",
    "rllm.trainer.save_freq=0",
)


def available() -> bool:
    return all(importlib.util.find_spec(name) is not None for name in ("torch", "transformers", "safetensors"))


def _port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _run(ranks: int, steps: int, run_dir: Path, strategy: str = "ddp") -> tuple[float, float]:
    """Steps per second (from ``time/step``, step 1 left out) and the update's share of a step."""
    train = ["-m", "rllm.cli.main", "train", "--no-progress", *SETTINGS, f"rllm.trainer.total_batches={steps}"]
    train += [f"rllm.trainer.output_dir={run_dir}", f"rllm.transformers.distributed.strategy={strategy}"]
    launcher = [sys.executable]
    if ranks > 1:
        launcher += ["-m", "torch.distributed.run", f"--nproc_per_node={ranks}", "--master_addr=127.0.0.1"]
        launcher.append(f"--master_port={_port()}")
    env = {**os.environ, "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1"}
    env.pop("WORLD_SIZE", None)
    done = subprocess.run([*launcher, *train], capture_output=True, text=True, env=env)
    if done.returncode != 0:
        sys.exit(f"rllm train on {ranks} rank(s) failed:\n{done.stderr}")
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    timed = [r for r in records if r["kind"] == "train"][1:]
    seconds = sum(r["time/step"] for r in timed)
    update = statistics.median(r["time/update"] / r["time/step"] for r in timed)
    return len(timed) / seconds, update


def distributed_benchmark(quick: bool = False) -> None:
    """Print the table: steps/s on 1 and 2 ranks, and the scaling efficiency."""
    steps = 4 if quick else 12
    with tempfile.TemporaryDirectory() as tmp:
        one, update = _run(1, steps, Path(tmp, "one"))
        two, _ = _run(2, steps, Path(tmp, "two"))
        sharded, _ = _run(2, steps, Path(tmp, "fsdp"), "fsdp")
    print(f"\n## The transformers backend on torchrun ranks (CPU, gloo; {steps} steps, step 1 left out)")
    print("tiny model widened to hidden 256, 4 layers; 16 tasks x 8 rollouts per step, 4 PPO epochs, 1 thread/rank")
    print(f"1 process: {one:.2f} steps/s (the update is {update:.0%} of a step)")
    print(f"2 ranks:   {two:.2f} steps/s (DDP), {sharded:.2f} steps/s (FSDP: {sharded / two:.2f}x DDP)")
    print(f"scaling efficiency (2-rank DDP rate / twice the 1-rank rate): {two / (2 * one):.2f}")
    print(f"machine: {os.cpu_count()} cores, shared: expect little")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few steps")
    distributed_benchmark(parser.parse_args().quick)


if __name__ == "__main__":
    main()
