"""The transformers backend: the default run's learning curve, and a race against TRL's GRPOTrainer.

``python bench/transformers_backend.py`` (needs ``pip install 'rllm[transformers]'``; the TRL part
also needs ``pip install trl``, which is installed for the benchmark only and skipped, saying so,
when absent). ``--steps N`` sets the race's length (default 150), ``--skip-default`` leaves out the
first part.

1. ``rllm train rllm.backend=transformers`` with every default, in a subprocess on this
   machine: wall time and validation pass@1 (greedy) before, after, and where it first reaches 0.9.
2. The race, in this process, one after the other: the same tiny model config (Qwen2-style,
   hidden 64, 2 layers, tied embeddings, the character tokenizer), task (max of two digits, the
   100 prompts), 16 prompts x 8 generations of one token per step, lr 1e-3, AdamW, one update per
   step (TRL's ``loss_type="dapo"``, ``beta=0``; rllm's ``ppo`` with token-mean, GRPO advantages).
   Both run with one torch thread (the backend's default for the tiny model on the CPU; on this
   2-core machine shared with other jobs, two threads ran these small ops up to 30x slower).
   Reported: seconds per step (the training loop's wall time / steps, first steps' warm-up
   included, and the median step), and mean train reward over the last 10 steps; the ratio is
   rllm's steps per second over TRL's.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PROMPTS, GENERATIONS, LR = 16, 8, 1e-3


def default_run() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        command = [sys.executable, "-m", "rllm.cli.main", "train", "--no-progress", "rllm.backend=transformers"]
        command.append(f"rllm.trainer.output_dir={tmp}/run")
        started = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "MPLBACKEND": "Agg"})
        wall = time.perf_counter() - started
        if done.returncode != 0:
            sys.exit(f"rllm train failed:\n{done.stderr}")
        records = [json.loads(line) for line in Path(tmp, "run", "metrics.jsonl").read_text().splitlines()]
    curve = [(r["step"], r["val/digit_max/pass@1"]) for r in records if r["kind"] == "val"]
    first = next((step for step, value in curve if value >= 0.9), None)
    print("1. rllm train rllm.backend=transformers (defaults: digit_max, 20 tasks x 8 rollouts, 50 steps)")
    print(f"   wall time {wall:.1f} s (process, start-up included)")
    print(
        f"   val pass@1 {curve[0][1]:.2f} at step 0 -> {curve[-1][1]:.2f} at step {curve[-1][0]}; "
        f"first >= 0.9 at step {first}"
    )
    print("   curve: " + ", ".join(f"{step}:{value:.2f}" for step, value in curve))


def rllm_race(steps: int, out: Path) -> tuple[float, float, float]:
    from rllm.config import load_config
    from rllm.trainer import UnifiedTrainer
    from rllm.trainer.logging import read_metrics

    config = load_config(
        overrides=[
            "rllm.backend=transformers",
            "rllm.transformers.device=cpu",
            f"rllm.transformers.lr={LR}",
            f"rllm.data.train_batch_size={PROMPTS}",
            f"rllm.rollout.n={GENERATIONS}",
            f"rllm.trainer.total_batches={steps}",
            "rllm.trainer.total_epochs=1000",
            "rllm.trainer.test_freq=0",
            "rllm.trainer.val_before_train=false",
            "rllm.trainer.save_freq=0",
            "rllm.trainer.logger=[jsonl]",
            f"rllm.trainer.output_dir={out}",
        ]
    )
    trainer = UnifiedTrainer(None, config, progress=False)
    started = time.perf_counter()
    try:
        trainer.fit()
    finally:
        trainer.shutdown()
    elapsed = time.perf_counter() - started
    records = [r for r in read_metrics(out / "metrics.jsonl") if r["kind"] == "train"]
    rewards = [r["reward/solver/mean"] for r in records]
    return elapsed / steps, statistics.median(r["time/step"] for r in records), sum(rewards[-10:]) / 10


def trl_race(steps: int, out: Path) -> tuple[float, float, float]:
    import torch
    from datasets import Dataset
    from omegaconf import OmegaConf
    from transformers import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    from rllm.tasks import VOCAB, digit_max_tasks
    from rllm_transformers.model import char_tokenizer, tiny_model

    torch.set_num_threads(1)
    torch.manual_seed(0)
    tokenizer = char_tokenizer()
    tokenizer.padding_side = "left"
    model = tiny_model(OmegaConf.create({"hidden_size": 64, "num_layers": 2}), len(tokenizer), 14, 13)
    tasks = digit_max_tasks()
    data = Dataset.from_list(
        [{"prompt": "".join(VOCAB[t] for t in task["prompt"]), "answer": str(task["answers"][0])} for task in tasks]
    )

    def reward(completions: list[str], answer: list[str], **kwargs: Any) -> list[float]:
        return [float(c.strip() == a) for c, a in zip(completions, answer, strict=True)]

    args = GRPOConfig(
        output_dir=str(out),
        use_cpu=True,
        per_device_train_batch_size=PROMPTS * GENERATIONS,
        num_generations=GENERATIONS,
        max_completion_length=1,
        learning_rate=LR,
        lr_scheduler_type="constant",
        weight_decay=0.0,
        beta=0.0,
        loss_type="dapo",
        max_steps=steps,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        seed=0,
        disable_tqdm=True,
    )
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=data, processing_class=tokenizer)
    trainer.remove_callback(PrinterCallback)  # one dict per step on stdout otherwise
    started = time.perf_counter()
    trainer.train()
    elapsed = time.perf_counter() - started
    logged = [entry for entry in trainer.state.log_history if "reward" in entry]
    rewards = [entry["reward"] for entry in logged]
    return elapsed / steps, statistics.median(entry["step_time"] for entry in logged), sum(rewards[-10:]) / 10


def _line(result: tuple[float, float, float]) -> str:
    total, median, reward = result
    return (
        f"{total * 1000:.1f} ms/step over the loop ({1 / total:.1f} steps/s), median step {median * 1000:.1f} ms, "
        f"reward {reward:.2f} (mean of the last 10 steps)"
    )


def race(steps: int) -> None:
    print(f"2. the race: digit_max, {PROMPTS} prompts x {GENERATIONS} generations of 1 token, lr {LR}, {steps} steps")
    with tempfile.TemporaryDirectory() as tmp:
        ours = rllm_race(steps, Path(tmp, "rllm"))
        print(f"   rllm transformers backend: {_line(ours)}")
        if importlib.util.find_spec("trl") is None:
            print("   TRL: not installed, skipped (pip install trl to race it; it is needed for this benchmark only)")
            return
        theirs = trl_race(steps, Path(tmp, "trl"))
        print(f"   TRL GRPOTrainer:           {_line(theirs)}")
        print(
            f"   steps/s rllm/TRL: {theirs[0] / ours[0]:.2f} over the loop, {theirs[1] / ours[1]:.2f} at the median "
            f"step (goal >= 1.5); reward rllm - TRL: {ours[2] - theirs[2]:+.2f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--skip-default", action="store_true")
    args = parser.parse_args()
    if not args.skip_default:
        default_run()
    race(args.steps)


if __name__ == "__main__":
    main()
