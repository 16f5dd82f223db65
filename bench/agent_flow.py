"""An agent flow written with the stock ``openai`` client, trained through the gateway: validation pass@1 over a run.

``python bench/agent_flow.py`` (needs ``pip install 'rllm[transformers,test]'`` for torch and
openai; ``--steps N``, default 250; ``--quick`` for 30 steps); ``python bench/run.py`` runs it too.
The flow is :class:`rllm.tasks.agent_flow.AnswerAgent` (no rllm import: it completes
``"<question> Answer: "`` with one token through ``/v1/completions`` of its episode's base URL),
scored by :class:`rllm.tasks.TextEvaluator` (``text_reward``), on the 100 ``text_digit_max``
tasks (train and validation), from a randomly initialised ``tiny`` model with the text
tokenizer: 20 tasks x 16 rollouts per step, lr 3e-3, greedy validation on all 100 tasks every
25 steps. Reported: wall time, seconds per step (the trainer's ``time/step``, median), the
validation curve and the first step at or above 0.9.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

SETTINGS = (
    "rllm.transformers.device=cpu",
    "rllm.transformers.tokenizer=text",
    "rllm.transformers.lr=0.003",
    "rllm.data.train_batch_size=20",
    "rllm.rollout.n=16",
    "rllm.trainer.total_epochs=1000",
    "rllm.trainer.save_freq=0",
    "rllm.trainer.logger=[jsonl]",
)


def agent_flow_benchmark(steps: int = 250, every: int = 25) -> list[tuple[int, float]]:
    """Train the flow ``steps`` steps; print and return the validation curve ``[(step, pass@1)]``."""
    from rllm.tasks import TextEvaluator, text_digit_max_tasks
    from rllm.tasks.agent_flow import AnswerAgent
    from rllm.trainer import AgentTrainer
    from rllm.trainer.logging import METRICS_FILE, read_metrics

    tasks = text_digit_max_tasks()
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        started = time.perf_counter()
        AgentTrainer(
            agent_flow=AnswerAgent(),
            evaluator=TextEvaluator(),
            train_dataset=tasks,
            val_dataset=tasks,
            backend="transformers",
            config=[
                *SETTINGS,
                f"rllm.trainer.total_batches={steps}",
                f"rllm.trainer.test_freq={every}",
                f"rllm.trainer.output_dir={run}",
            ],
        ).train()
        wall = time.perf_counter() - started
        records = read_metrics(run / METRICS_FILE)
    curve = [(r["step"], r["val/text_digit_max/pass@1"]) for r in records if r["kind"] == "val"]
    step_times = [r["time/step"] for r in records if r["kind"] == "train" and r["step"] > 1]
    first = next((step for step, value in curve if value >= 0.9), None)
    print(f"agent flow through the gateway (AnswerAgent, openai client; text_digit_max, {steps} steps of 20 x 16)")
    print(f"   wall time {wall:.1f} s, {statistics.median(step_times):.2f} s per step (median)")
    last = curve[-1]
    print(f"   val pass@1 {curve[0][1]:.2f} at step 0 -> {last[1]:.2f} at step {last[0]}; first >= 0.9 at {first}")
    print("   curve: " + ", ".join(f"{step}:{value:.2f}" for step, value in curve))
    return curve


def available() -> bool:
    import importlib.util

    return all(importlib.util.find_spec(name) is not None for name in ("torch", "transformers", "openai"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=250, help="training steps (default 250)")
    parser.add_argument("--quick", action="store_true", help="30 steps, validation every 10")
    args = parser.parse_args()
    if args.quick:
        agent_flow_benchmark(30, 10)
    else:
        agent_flow_benchmark(args.steps)


if __name__ == "__main__":
    main()
