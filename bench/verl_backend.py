"""Training steps per second of verl's worker (rllm_verl.worker, FSDP2 on gloo, CPU) against the transformers backend.

Both train the same saved tiny model on the same batch (``--rows`` single-turn rows of random
tokens, prompts of 8 to 24 tokens, responses of 8 to 32), 1 thread, 1 rank, loss ``vanilla``.
A step is each side's real path from rllm's trajectory groups to updated weights: the
transformers backend's stages 4, 5 and 7 (with one optimizer step per batch it takes the old
log-probs from the update's own forward pass), and for verl the row packing, the worker's
``infer_batch`` (the old log-probs, as verl's trainer computes them) and ``train_batch``.
The ratio is the median of paired rounds, one side right after the other, measured in this run.

``python bench/verl_backend.py [--rows 32] [--rounds 5]`` (needs verl and transformers; about a minute).

``--train``: whole ``rllm train`` runs instead, ``rllm.backend=verl`` against ``rllm.backend=transformers`` on the
digit task (20 tasks x 8 rollouts, ``--steps`` steps, default 20), alternating ``--rounds`` times (default 2 here);
steps/s is the steps after the first over their ``time/step`` (start-up and the first step's caches left out).
About a minute and a half.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path
from typing import Any

from verl_bridge import paired


def _groups(vocab: int, rows: int, seed: int = 0) -> list[Any]:
    import torch

    from rllm.types import Step, Trajectory, TrajectoryGroup

    g = torch.Generator().manual_seed(seed)

    def tokens(low: int, high: int) -> list[int]:
        count = int(torch.randint(low, high + 1, (), generator=g))
        return torch.randint(3, vocab, (count,), generator=g).tolist()

    groups = []
    for index in range(0, rows, 4):
        trajectories = []
        for _ in range(min(4, rows - index)):
            step = Step(prompt_ids=tokens(8, 24), response_ids=tokens(8, 32))
            step.advantage = float(torch.randn((), generator=g))
            trajectories.append(Trajectory(steps=[step]))
        groups.append(TrajectoryGroup(trajectories=trajectories, group_id=f"g{index}"))
    return groups


def _train_steps_per_s(backend: str, steps: int) -> float:
    """Steps/s of one ``rllm train`` run of ``backend`` (its records' ``time/step``, the first step left out)."""
    import json
    import os
    import subprocess
    import sys

    with tempfile.TemporaryDirectory(prefix="rllm-verl-bench-train-") as name:
        section = ["rllm.transformers.device=cpu"] if backend == "transformers" else []
        command = [sys.executable, "-m", "rllm.cli.main", "train", "--no-progress", f"rllm.backend={backend}"]
        command += [
            *section,
            "rllm.data.train_batch_size=20",
            "rllm.rollout.n=8",
            f"rllm.trainer.total_batches={steps}",
        ]
        command += ["rllm.trainer.test_freq=0", "rllm.trainer.save_freq=0", "rllm.trainer.logger=[jsonl]"]
        command += [f"rllm.trainer.output_dir={name}"]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "RLLM_DISABLED_PLUGINS": "fast", "MPLBACKEND": "Agg"}
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
        if done.returncode:
            raise SystemExit(f"rllm train rllm.backend={backend} failed: {done.stderr[-2000:]}")
        records = [json.loads(line) for line in (Path(name) / "metrics.jsonl").read_text().splitlines()]
        times = [r["time/step"] for r in records if r["kind"] == "train"][1:]
        return len(times) / sum(times)


def train_runs(steps: int, rounds: int) -> None:
    import statistics

    ratios, verl, transformers = [], [], []
    for _ in range(rounds):
        verl.append(_train_steps_per_s("verl", steps))
        transformers.append(_train_steps_per_s("transformers", steps))
        ratios.append(verl[-1] / transformers[-1])
    print(f"rllm train, digit task, 20 tasks x 8 rollouts, {steps} steps, {rounds} rounds, 1 process (CPU)")
    print(f"rllm.backend=transformers: {max(transformers):.2f} steps/s (best)")
    print(f"rllm.backend=verl:         {max(verl):.2f} steps/s (best)")
    print(f"verl / transformers steps/s: {statistics.median(ratios):.2f}x (median of paired rounds)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--train", action="store_true", help="time whole rllm train runs of both backends")
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    if args.train:
        train_runs(args.steps, args.rounds or 2)
        return
    args.rounds = args.rounds or 5

    from rllm_verl.cpu_platform import prepare_cpu_process

    prepare_cpu_process()
    import torch

    from rllm.config import load_config
    from rllm.trainer import TrainerState, UnifiedTrainer
    from rllm_verl.worker import VerlWorker, WorkerOptions

    torch.set_num_threads(1)
    tmp = Path(tempfile.mkdtemp(prefix="rllm-verl-bench-"))
    config = load_config(
        overrides=[
            "rllm.backend=transformers",
            "rllm.transformers.device=cpu",
            "rllm.transformers.num_threads=1",
            f"rllm.trainer.output_dir={tmp / 'run'}",
        ]
    )
    trainer = UnifiedTrainer(None, config, progress=False)
    backend = trainer.backend
    backend.model.save_pretrained(tmp / "model")
    vocab = int(backend.model.get_input_embeddings().num_embeddings)
    pad = int(backend.tokenizer.pad_token_id)
    options = config.rllm.transformers
    worker = VerlWorker(
        tmp / "model",
        WorkerOptions(
            lr=float(options.lr),
            betas=(float(options.adam_beta1), float(options.adam_beta2)),
            weight_decay=float(options.weight_decay),
            max_grad_norm=float(options.max_grad_norm),
        ),
        pad_id=pad,
    )

    def transformers_step() -> None:
        state = TrainerState(global_step=1, total_steps=1, trajectory_groups=_groups(vocab, args.rows))
        state.backend_batch = backend.transform_to_backend_batch(state)
        asyncio.run(backend.process_backend_batch(state))
        asyncio.run(backend.update_policy(state))

    def verl_step() -> None:
        state = TrainerState(trajectory_groups=_groups(vocab, args.rows))
        batch = backend.transform_to_backend_batch(state)  # rllm's packing, shared by both sides
        old = worker.log_probs(batch.ids, batch.attention, batch.mask)
        worker.update(batch.ids, batch.attention, batch.mask, old * batch.mask, batch.advantages())

    transformers_step(), verl_step()  # warm-up: first calls build caches on both sides
    # verl's time after the transformers backend's in each round: median of transformers' time over verl's
    ratio, best_v, best_t = paired(verl_step, transformers_step, args.rounds)
    trainer.shutdown()
    print(f"rows per step: {args.rows}, rounds: {args.rounds}, 1 rank, 1 thread (CPU)")
    print(f"transformers backend: {1 / best_t:.2f} steps/s (best)")
    print(f"verl TrainingWorker:  {1 / best_v:.2f} steps/s (best)")
    print(f"verl / transformers steps/s: {ratio:.2f}x (median of paired rounds)")


if __name__ == "__main__":
    main()
