"""The text tasks: their questions and answers, the reply grammar and the reward read from a reply, by hand."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest

from rllm.errors import DataError
from rllm.tasks import TEXT_TASKS, format_answer, parse_answer, text_digit_max_tasks, text_digit_sum_tasks, text_reward


def test_text_digit_max_asks_for_the_larger_digit() -> None:
    tasks = {task["uid"]: task for task in text_digit_max_tasks()}
    assert len(tasks) == 100
    assert tasks["text_digit_max:3,9"] == {
        "uid": "text_digit_max:3,9",
        "data_source": "text_digit_max",
        "question": "What is the largest digit in 3 9?",
        "ground_truth": 9,
    }
    assert tasks["text_digit_max:7,2"]["ground_truth"] == 7
    assert tasks["text_digit_max:4,4"]["ground_truth"] == 4


def test_text_digit_sum_asks_for_the_last_digit_of_the_sum() -> None:
    tasks = {task["uid"]: task for task in text_digit_sum_tasks()}
    assert len(tasks) == 100
    assert tasks["text_digit_sum:3+9"]["question"] == "What is the last digit of 3 + 9?"
    assert tasks["text_digit_sum:3+9"]["ground_truth"] == 2
    assert tasks["text_digit_sum:4+5"]["ground_truth"] == 9
    assert tasks["text_digit_sum:0+0"]["ground_truth"] == 0


def test_every_text_task_is_ascii_and_its_right_reply_scores_one() -> None:
    for name, build in TEXT_TASKS.items():
        for task in build():
            assert task["data_source"] == name
            assert task["question"].isascii()
            assert text_reward(task, format_answer(task["ground_truth"])) == 1.0


@pytest.mark.parametrize(
    ("reply", "parsed"),
    [
        ("Answer: 9", 9),
        ("answer:9", 9),
        ("ANSWER = 7.", 7),
        ("The largest is 3. Answer: 3", 3),
        ("Answer: 2\nAnswer: 5", 5),  # the last answer counts
        ("Answer: -4", -4),
        ("  6 ", 6),  # a bare integer is an answer
        ("6.", 6),
        ("Answer: 9.5", None),  # not an integer
        ("Answer: 9x", None),
        ("Answer:", None),
        ("Answer: nine", None),
        ("I think 9", None),
        ("", None),
        ("Answer: " + "9" * 19, None),  # too long to be an answer; no unbounded int()
        ("9" * 5000, None),
    ],
)
def test_parse_answer(reply: str, parsed: int | None) -> None:
    assert parse_answer(reply) == parsed


def test_text_reward_by_hand() -> None:
    task = {"uid": "text_digit_max:3,9", "ground_truth": 9}
    assert text_reward(task, "Answer: 9") == 1.0
    assert text_reward(task, "Answer: 3") == 0.0
    assert text_reward(task, "Answer: 9x") == 0.0  # malformed: scores 0, no error
    assert text_reward(task, "garbage <|eos|>") == 0.0
    assert text_reward(task, SimpleNamespace(action="Answer: 9")) == 1.0  # rLLM's Action carries it as .action
    assert text_reward(task, SimpleNamespace(action=None)) == 0.0
    assert text_reward(task, None) == 0.0
    with pytest.raises(DataError, match=r"task 'q1' has no 'ground_truth'"):
        text_reward({"uid": "q1"}, "Answer: 9")


def test_the_text_tasks_import_without_torch() -> None:
    code = "import sys; sys.modules['torch'] = None; import rllm.tasks.text; print('ok')"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "ok", done.stderr
