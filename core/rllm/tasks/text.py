"""Text versions of the built-in tasks: a question string in, a reply string out, a reward read from the reply.

Each task is a dict in rLLM's shape (``question``, ``ground_truth``, ``data_source``, ``uid``),
so a workflow that sends ``[{"role": "user", "content": task["question"]}]`` to a chat model
and scores the reply with :func:`text_reward` trains on it. The reply's grammar is
``Answer: <integer>`` (:func:`format_answer`); :func:`parse_answer` reads it back and gives
None for a reply that does not follow it, which scores 0 (a malformed answer is the model's
mistake, not an error). ``text_digit_max`` asks for the larger of two digits,
``text_digit_sum`` for ``(a + b) mod 10``, as their token-id twins in :mod:`rllm.tasks.digits`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from rllm.errors import DataError
from rllm.eval.types import EvalOutput

ANSWER_PREFIX = "Answer: "

_ANSWER = re.compile(r"answer\s*[:=]\s*([+-]?\d{1,18})(?!\w|\.\d)", re.IGNORECASE)
"""``answer:`` (any case, ``=`` accepted) then an integer not continued by a letter, digit or decimals."""
_BARE = re.compile(r"\s*([+-]?\d{1,18})\s*\.?\s*")


def format_answer(value: int) -> str:
    """The reply the text tasks expect: ``Answer: 9``."""
    return f"{ANSWER_PREFIX}{int(value)}"


def parse_answer(reply: str) -> int | None:
    """The integer of the last ``Answer: N`` in ``reply`` (or a reply that is a bare integer), else None.

    Numbers of more than 18 digits do not parse (no unbounded ``int()`` on model output).
    """
    matches = _ANSWER.findall(reply)
    if matches:
        return int(matches[-1])
    bare = _BARE.fullmatch(reply)
    return int(bare.group(1)) if bare else None


def text_reward(task: dict[str, Any], response: Any) -> float:
    """1.0 when the reply's answer equals ``task["ground_truth"]``, else 0.0 (unparseable replies included).

    ``response`` is the reply's text or an object carrying it as ``.action`` (rLLM's ``Action``).
    """
    if "ground_truth" not in task:
        raise DataError(f"task {task.get('uid', task)!r} has no 'ground_truth'; text_reward scores against it.")
    reply = getattr(response, "action", response)
    if not isinstance(reply, str):
        return 0.0
    return 1.0 if parse_answer(reply) == int(task["ground_truth"]) else 0.0


class TextEvaluator:
    """An :class:`~rllm.types.Evaluator` of the text tasks: :func:`text_reward` of the episode's last reply."""

    def evaluate(self, task: dict[str, Any], episode: Any) -> EvalOutput:
        steps = [step for trajectory in episode.trajectories for step in trajectory.steps]
        reward = text_reward(task, steps[-1].model_response if steps else None)
        return EvalOutput(reward=reward, is_correct=reward == 1.0)


def text_digit_max_tasks() -> list[dict[str, Any]]:
    return [
        {
            "uid": f"text_digit_max:{a},{b}",
            "data_source": "text_digit_max",
            "question": f"What is the largest digit in {a} {b}?",
            "ground_truth": max(a, b),
        }
        for a in range(10)
        for b in range(10)
    ]


def text_digit_sum_tasks() -> list[dict[str, Any]]:
    return [
        {
            "uid": f"text_digit_sum:{a}+{b}",
            "data_source": "text_digit_sum",
            "question": f"What is the last digit of {a} + {b}?",
            "ground_truth": (a + b) % 10,
        }
        for a in range(10)
        for b in range(10)
    ]


TEXT_TASKS: dict[str, Callable[[], list[dict[str, Any]]]] = {
    "text_digit_max": text_digit_max_tasks,
    "text_digit_sum": text_digit_sum_tasks,
}
