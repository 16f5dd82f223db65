"""What keeping a committed trajectory costs: ``copy.deepcopy`` (before) against ``Trajectory.snapshot`` (now).

``Workflow.commit`` and ``collect_trajectories`` keep a copy of each trajectory, so an agent
that goes on does not change what was committed. ``deepcopy`` walks every token id and
log-prob through its memo; ``snapshot`` copies those lists flat (they hold plain numbers) and
deep-copies the rest. A trajectory of ``--steps`` chat steps, each with a model output and
``--prompt`` prompt and ``--response`` response tokens, is copied both ways in the same run;
medians of ``--rounds`` rounds of 200 copies. ``python bench/trajectory_copy.py`` (seconds).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from copy import deepcopy
from functools import partial

from rllm.engine import ModelOutput
from rllm.types import Step, Trajectory

COPIES = 200


def trajectory(steps: int, prompt: int, response: int) -> Trajectory:
    made = []
    for index in range(steps):
        output = ModelOutput(
            text="Answer: 7",
            content="Answer: 7",
            prompt_ids=list(range(prompt)),
            completion_ids=list(range(response)),
            logprobs=[-0.5] * response,
        )
        messages = [{"role": "user", "content": f"question {index}"}, {"role": "assistant", "content": "Answer: 7"}]
        made.append(Step(chat_completions=messages, model_response="Answer: 7", reward=1.0, model_output=output))
    return Trajectory(name="solver", steps=made)


def _microseconds(copy: Callable[[], Trajectory], rounds: int) -> float:
    series = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(COPIES):
            copy()
        series.append((time.perf_counter() - start) / COPIES * 1e6)
    return statistics.median(series)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--prompt", type=int, default=200)
    parser.add_argument("--response", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    print(f"one trajectory, {args.prompt} prompt + {args.response} response tokens a step (µs per copy)")
    print(f"{'steps':>6}{'deepcopy (before)':>19}{'snapshot (now)':>16}{'ratio':>8}")
    for steps in args.steps:
        kept = trajectory(steps, args.prompt, args.response)
        before = _microseconds(partial(deepcopy, kept), args.rounds)
        now = _microseconds(kept.snapshot, args.rounds)
        print(f"{steps:>6}{before:>19.1f}{now:>16.1f}{before / now:>7.1f}x")


if __name__ == "__main__":
    main()
