"""rLLM's unmodified ``SimpleWorkflow`` learns ``text_digit_max`` through ``AgentTrainer``: validation pass@1.

``python bench/simple_workflow.py`` (needs ``pip install 'rllm[transformers]'``; ``--steps N``,
``--every N``, ``--lr X``, ``--seed N``, then any config overrides ``key=value``; ``--quick`` for
30 steps); ``python bench/run.py`` runs it too. The workflow is rLLM's own file, as
``tests/fixtures/rllm_upstream/simple_workflow.py`` copies it: it sends
``[{"role": "user", "content": question}]`` to ``get_model_response`` and scores the reply's
content with a reward function, here :func:`rllm.tasks.text_reward` (the reply's
``Answer: N`` against the task's answer). The model starts from the warm start
(``python -m rllm_transformers.warm_start``: the tiny text model taught the reply's format with
random digits, and to read digits with lessons such as ``Repeat the digit 7.``, so it knows how
to answer but not what), on the 100 ``text_digit_max`` tasks (train and validation), ``BATCH``
tasks x ``ROLLOUTS`` rollouts per step, greedy validation on all 100 tasks every ``--every``
steps. Reported: wall time (the warm start's seconds included), seconds per step (the
trainer's ``time/step``, median), the validation curve and the first step at or above 0.9, with
an upper bound on its seconds from the start (the warm start's included).

The goal is 0.9 within 5 minutes on 2 cores. Two runs side by side on 2 cores with other jobs
(2026-12-05, 1.4-1.7 s per step): seed 0 went 0.18 -> 0.67 (step 25) -> 0.94 (step 50) -> 1.00
(step 75), seed 2 0.20 -> 0.93 (step 25) -> 1.00 (step 50), seed 1 0.21 -> 0.94 (step 25); the
whole 150 steps took 222-282 s with the warm start.
"""

from __future__ import annotations

import argparse
import importlib.util
import tempfile
import time
from pathlib import Path
from typing import Any

from curve import report_curve

FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "rllm_upstream" / "simple_workflow.py"
BATCH, ROLLOUTS, LR, STEPS, EVERY = 10, 32, 1e-3, 150, 25


def upstream_simple_workflow() -> type:
    spec = importlib.util.spec_from_file_location("rllm_upstream_simple_workflow", FIXTURE)
    if spec is None or spec.loader is None:
        raise SystemExit(f"{FIXTURE}: not found; run the benchmark from a checkout of rllm.")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.SimpleWorkflow  # type: ignore[no-any-return]


def text_reward_function(task: dict[str, Any], action: Any) -> Any:
    from rllm.rewards.reward_types import RewardOutput
    from rllm.tasks import text_reward

    return RewardOutput(reward=text_reward(task, action))


def simple_workflow_benchmark(
    steps: int = STEPS, every: int = EVERY, lr: float = LR, seed: int = 0, overrides: tuple[str, ...] = ()
) -> list[tuple[int, float]]:
    """Train ``steps`` steps; print and return the validation curve ``[(step, pass@1)]``."""
    from rllm.tasks import TEXT_TASKS
    from rllm.trainer import AgentTrainer
    from rllm.trainer.logging import METRICS_FILE, read_metrics
    from rllm_transformers.warm_start import build_warm_start

    tasks = TEXT_TASKS["text_digit_max"]()
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        started = time.perf_counter()
        build_warm_start(Path(tmp) / "warm", seed=seed)
        AgentTrainer(
            workflow_class=upstream_simple_workflow(),
            workflow_args={"reward_function": text_reward_function},
            train_dataset=tasks,
            val_dataset=tasks,
            backend="transformers",
            config=[
                "rllm.transformers.device=cpu",
                f"rllm.transformers.model={Path(tmp) / 'warm'}",
                "rllm.transformers.max_new_tokens=10",
                f"rllm.transformers.lr={lr}",
                f"rllm.transformers.seed={seed}",
                f"rllm.data.train_batch_size={BATCH}",
                f"rllm.rollout.n={ROLLOUTS}",
                "rllm.trainer.total_epochs=1000",
                f"rllm.trainer.total_batches={steps}",
                f"rllm.trainer.test_freq={every}",
                "rllm.trainer.save_freq=0",
                "rllm.trainer.logger=[jsonl]",
                f"rllm.trainer.output_dir={run}",
                *overrides,
            ],
        ).train()
        wall = time.perf_counter() - started
        records = read_metrics(run / METRICS_FILE)
    title = (
        f"rLLM's SimpleWorkflow through AgentTrainer (text_digit_max from the warm start, {steps} steps of "
        f"{BATCH} x {ROLLOUTS}, lr {lr}, seed {seed}; the wall time includes building the warm start)"
    )
    return report_curve(title, wall, records, "val/text_digit_max/pass@1")


def available() -> bool:
    return all(importlib.util.find_spec(name) is not None for name in ("torch", "transformers", "safetensors"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=STEPS, help=f"training steps (default {STEPS})")
    parser.add_argument("--every", type=int, default=EVERY, help=f"validate every N steps (default {EVERY})")
    parser.add_argument("--lr", type=float, default=LR, help=f"learning rate (default {LR})")
    parser.add_argument("--seed", type=int, default=0, help="seed of the warm start and of the run (default 0)")
    parser.add_argument("--quick", action="store_true", help="30 steps, validation every 10")
    parser.add_argument("overrides", nargs="*", help="more config overrides (key=value), applied last")
    args = parser.parse_args()
    steps, every = (30, 10) if args.quick else (args.steps, args.every)
    simple_workflow_benchmark(steps, every, args.lr, args.seed, tuple(args.overrides))


if __name__ == "__main__":
    main()
