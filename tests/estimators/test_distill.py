"""On-policy distillation: rLLM's functions at rLLM's paths, the ``distill`` estimator, both by hand and against rLLM.

``tests/fixtures/rllm_upstream/distill_advantage.py`` is rLLM's own module, unmodified: its
functions are the reference on random inputs (the same float64 recurrence, so equal to the
last bit); the hand examples fix the rule itself.
"""

from __future__ import annotations

import asyncio
import importlib.util
import random
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

import rllm
from rllm.errors import EngineCallError, EstimatorOptionError, InputFieldError, WorkflowError
from rllm.trainer.distill import compute_distill_reverse_kl, compute_step_distill_advantage, discounted_future_sum
from rllm.types import Step

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "rllm_upstream" / "distill_advantage.py"


def upstream() -> ModuleType:
    spec = importlib.util.spec_from_file_location("rllm_upstream_distill_advantage", FIXTURE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_rule_by_hand() -> None:
    # gaps 1, -1, 2; discount 0.5 from the end: 2, -1 + 1 = 0, 1 + 0 = 1; clip to [-0.5, 1.5]
    assert compute_distill_reverse_kl([-1.0, -2.0, -0.5], [-2.0, -1.0, -2.5], -5.0, 5.0) == [1.0, -1.0, 2.0]
    assert compute_distill_reverse_kl([-1.0, -2.0, -0.5], [-2.0, -1.0, -2.5], -0.5, 1.5, 1.0, 0.5) == [1.0, 0.0, 1.5]
    assert compute_distill_reverse_kl([-1.0], [-2.0], -5.0, 5.0, kl_penalty_coef=0.25) == [0.25]
    assert discounted_future_sum([1.0, 2.0, 3.0], 0.5) == [2.75, 3.5, 3.0]
    assert discounted_future_sum([], 0.9) == []


def test_rllms_functions_give_rllms_numbers_on_random_inputs() -> None:
    theirs = upstream()
    rng = random.Random(0)
    for _ in range(200):
        n = rng.randint(1, 40)
        teacher = [-rng.expovariate(1.0) for _ in range(n)]
        student = [-rng.expovariate(1.0) for _ in range(n)]
        low, high = sorted(rng.uniform(-4, 4) for _ in range(2))
        coef, discount = rng.choice([1.0, rng.uniform(0, 3)]), rng.choice([0.0, rng.uniform(0, 1)])
        args = (teacher, student, low, high, coef, discount)
        assert compute_distill_reverse_kl(*args) == theirs.compute_distill_reverse_kl(*args)
        assert discounted_future_sum(teacher, discount) == theirs.discounted_future_sum(teacher, discount)


def test_the_estimator_writes_each_tokens_gap_by_hand() -> None:
    advantages = rllm.compute_advantages(
        "distill",
        [1.0, 0.0],
        [0, 0],
        teacher_log_probs=[[-1.0, -2.0], [-0.5]],
        rollout_log_probs=[[-2.0, -1.0], [-1.5]],
        kl_discount_factor=0.5,
        clip_max=0.8,
    )
    # trajectory 1: gaps 1, -1 -> 1 + 0.5 * -1 = 0.5, -1; trajectory 2: gap 1, clipped to 0.8. Rewards do not enter.
    assert advantages.values.tolist() == [0.5, -1.0, 0.8] and advantages.offsets.tolist() == [0, 2, 3]


def test_the_estimator_and_rllms_step_function_agree() -> None:
    rng = np.random.default_rng(1)
    teacher, student = [list(-rng.exponential(size=5)) for _ in range(2)]
    ours = rllm.compute_advantages(
        "distill", [0.0], [0], teacher_log_probs=[teacher], rollout_log_probs=[student], kl_discount_factor=0.9
    )
    assert ours.values.tolist() == upstream().compute_distill_reverse_kl(teacher, student, -np.inf, np.inf, 1.0, 0.9)


class Teacher:
    """Scores ids as a teacher engine does: log-prob -0.1 * id at each position after the first."""

    def __init__(self, drop: int = 0) -> None:
        self.drop = drop
        self.seen: list[list[int]] = []

    async def compute_logprobs(self, ids: list[int]) -> list[float]:
        self.seen.append(list(ids))
        return [0.0, *(-0.1 * i for i in ids[1:])][: len(ids) - self.drop]


def test_a_steps_advantage_scores_its_response_after_its_prompt() -> None:
    step = Step(prompt_ids=[5, 6], response_ids=[1, 2, 3], logprobs=[-0.5, -0.5, -0.5])
    teacher = Teacher()
    got = asyncio.run(compute_step_distill_advantage(step, teacher, shared_tokenizer=True))
    assert teacher.seen == [[5, 6, 1, 2, 3]]
    assert got == pytest.approx([-0.1 + 0.5, -0.2 + 0.5, -0.3 + 0.5])


@pytest.mark.parametrize(
    ("step", "teacher", "error", "message"),
    [
        (
            Step(response_ids=[1], logprobs=[-1.0]),
            Teacher(),
            WorkflowError,
            r"^Distillation needs the step's prompt_ids",
        ),
        (
            Step(prompt_ids=[1], response_ids=[2]),
            Teacher(),
            WorkflowError,
            r"needs the step's response_ids and logprobs",
        ),
        (Step(prompt_ids=[1], response_ids=[2], logprobs=[-1.0]), Teacher(drop=1), EngineCallError, r"scored 1 of 2"),
    ],
)
def test_what_a_step_lacks_is_one_line(step: Step, teacher: Teacher, error: type, message: str) -> None:
    with pytest.raises(error, match=message) as caught:
        asyncio.run(compute_step_distill_advantage(step, teacher, shared_tokenizer=True))
    assert "\n" not in str(caught.value)


class Vocab:
    def __init__(self, name: str, tokens: dict[str, int]) -> None:
        self.name_or_path, self.tokens, self.eos_token_id = name, tokens, 0

    def get_vocab(self) -> dict[str, int]:
        return self.tokens


def test_a_teacher_with_another_tokenizer_is_refused_naming_both() -> None:
    step = Step(prompt_ids=[1], response_ids=[2], logprobs=[-1.0])
    student, teacher = Vocab("student-tok", {"a": 0}), Vocab("teacher-tok", {"b": 0})
    with pytest.raises(
        WorkflowError, match=r"teacher's tokenizer 'teacher-tok' differs from the student's 'student-tok'"
    ):
        asyncio.run(compute_step_distill_advantage(step, Teacher(), student, teacher))
    same = Vocab("teacher-copy", {"a": 0})  # one vocabulary under another name is one tokenizer
    assert asyncio.run(compute_step_distill_advantage(step, Teacher(), student, same)) == pytest.approx([0.8])


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"clip_min": 1.0, "clip_max": 0.0}, r"^Estimator 'distill': clip_min=1 is above clip_max=0"),
        ({"kl_discount_factor": -0.1}, r"kl_discount_factor"),
    ],
)
def test_bad_options_are_one_line(options: dict, message: str) -> None:
    with pytest.raises(EstimatorOptionError, match=message):
        rllm.compute_advantages(
            "distill", [0.0], [0], teacher_log_probs=[[-1.0]], rollout_log_probs=[[-1.0]], **options
        )


def test_rllm_path_cuts_log_prob_lists_of_different_lengths_like_rllm() -> None:
    # rLLM's function at this path cuts the longer list; code written for rLLM runs unchanged.
    assert compute_distill_reverse_kl([-1.0, -2.0], [-1.5], -5.0, 5.0) == [0.5]
    assert compute_distill_reverse_kl([-1.0], [-3.0, -2.0, -0.5], -5.0, 5.0, 2.0) == [4.0]
    assert compute_distill_reverse_kl([], [-1.0], -5.0, 5.0) == []
    theirs = upstream()
    for args in (([-1.0, -2.0, -0.2], [-1.5, -0.1], -1.0, 1.0, 1.0, 0.5), ([-0.3], [-1.0, -2.0], -9.0, 9.0)):
        assert compute_distill_reverse_kl(*args) == pytest.approx(theirs.compute_distill_reverse_kl(*args))


def test_distill_estimator_still_refuses_log_prob_lists_of_different_lengths() -> None:
    with pytest.raises(InputFieldError, match=r"different token counts"):
        rllm.compute_advantages("distill", [0.0], [0], teacher_log_probs=[[-1.0, -2.0]], rollout_log_probs=[[-1.0]])
