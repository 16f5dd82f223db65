"""Built-in tasks with verifiable rewards, over a 14-token vocabulary.

``digit_sum`` (single turn): the prompt ``a + b =`` asks for ``(a + b) mod 10``.
``digit_max`` (single turn): the prompt ``a b =`` asks for the larger digit (what a small
transformer learns by RL in seconds; ``mod 10`` it does not learn in hundreds of steps).
``digit_chain`` (multi-step): the prompt ``a + b >`` asks for ``a+b``, ``a+2b``, ``a+3b``
(mod 10), one per turn, each turn seeing the conversation so far; a wrong answer ends the
episode. The reward is the share of answers given correctly; ``is_correct`` needs all of them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rllm.engine import PROMPT_TOO_LONG
from rllm.errors import ConfigError
from rllm.types import Episode, Step, TerminationReason, Trajectory
from rllm.workflows import Workflow

VOCAB = [*(str(d) for d in range(10)), "+", "=", ">", "<eos>"]
PLUS, EQUALS, ARROW, EOS = 10, 11, 12, 13
ROLE = "solver"


def decode(token_ids: Sequence[int]) -> str:
    return " ".join(VOCAB[t] for t in token_ids)


def digit_sum_tasks() -> list[dict[str, Any]]:
    return [
        {
            "uid": f"digit_sum:{a}+{b}",
            "data_source": "digit_sum",
            "prompt": [a, PLUS, b, EQUALS],
            "answers": [(a + b) % 10],
        }
        for a in range(10)
        for b in range(10)
    ]


def digit_max_tasks() -> list[dict[str, Any]]:
    return [
        {"uid": f"digit_max:{a},{b}", "data_source": "digit_max", "prompt": [a, b, EQUALS], "answers": [max(a, b)]}
        for a in range(10)
        for b in range(10)
    ]


def digit_chain_tasks(turns: int = 3) -> list[dict[str, Any]]:
    return [
        {
            "uid": f"digit_chain:{a}+{b}",
            "data_source": "digit_chain",
            "prompt": [a, PLUS, b, ARROW],
            "answers": [(a + k * b) % 10 for k in range(1, turns + 1)],
        }
        for a in range(10)
        for b in range(10)
    ]


TASKS: dict[str, Callable[[], list[dict[str, Any]]]] = {
    "digit_sum": digit_sum_tasks,
    "digit_max": digit_max_tasks,
    "digit_chain": digit_chain_tasks,
}


def build_tasks(names: Sequence[str]) -> list[dict[str, Any]]:
    """The tasks of every named built-in task family, in a fixed order."""
    unknown = [name for name in names if name not in TASKS]
    if unknown or not names:
        raise ConfigError(
            f"rllm.embedded.tasks={list(names)} must name one or more of {', '.join(TASKS)}"
            + (f"; unknown: {unknown}." if unknown else ".")
        )
    return [task for name in names for task in TASKS[name]()]


class ArithmeticWorkflow(Workflow):
    """Asks the model for each expected answer in turn; stops at the first wrong one."""

    async def run(self, task: dict[str, Any], uid: str, **kwargs: Any) -> Episode:
        context = list(task["prompt"])
        answers = task["answers"]
        steps: list[Step] = []
        correct = 0
        for expected in answers:
            generation = await self.rollout_engine.generate(context, max_tokens=1)
            if generation.finish_reason == PROMPT_TOO_LONG:  # longer than the engine takes
                if steps:
                    steps[-1].reward, steps[-1].done = correct / len(answers), True
                return Episode(
                    task=task,
                    termination_reason=TerminationReason.MAX_PROMPT_LENGTH_EXCEEDED,
                    trajectories=[Trajectory(name=ROLE, task=task, steps=steps)] if steps else [],
                )
            answer = generation.response_ids[0]
            steps.append(
                Step(
                    prompt_ids=list(context),
                    observation=list(context),  # the state: ids are the engine's own, digit or text
                    response_ids=list(generation.response_ids),
                    logprobs=list(generation.logprobs),
                    model_response=generation.text,
                    action=answer,
                    weight_version=generation.weight_version,
                )
            )
            if answer != expected:
                break
            correct += 1
            context += generation.response_ids
        reward = correct / len(answers)
        steps[-1].reward = reward
        steps[-1].done = True
        return Episode(
            task=task,
            termination_reason=TerminationReason.ENV_DONE,
            is_correct=correct == len(answers),
            trajectories=[Trajectory(name=ROLE, task=task, steps=steps)],
            metrics={"turns": float(len(steps)), "reward": reward},
        )
