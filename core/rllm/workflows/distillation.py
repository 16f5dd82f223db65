"""rLLM's distillation functions (at rLLM's path ``rllm.trainer.distill.advantage``), on rllm's distillation kernel.

The numbers are rLLM's: ``kl_penalty_coef * (teacher - student)`` per token, summed over later
tokens with ``kl_discount_factor`` when it is above 0, then clipped; log-prob lists of different
lengths are cut to the shorter one, as rLLM does, so code written for rLLM runs unchanged (the
``distill`` estimator refuses them). One thing differs on purpose: a teacher whose tokenizer
differs from the student's is refused by name, since aligning tokens across vocabularies is not
built here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from rllm.engine.vocabulary import same_vocabulary
from rllm.errors import EngineCallError, WorkflowError
from rllm.estimators.distillation import reverse_kl_advantages
from rllm.estimators.ragged import Ragged
from rllm.estimators.statistics import suffix_discounted
from rllm.types import Step


def _row(values: Sequence[float]) -> Ragged:
    return Ragged(values=np.asarray(values, dtype=np.float64), offsets=np.array([0, len(values)]), per_token=True)


def discounted_future_sum(values: list[float], discount_factor: float) -> list[float]:
    """``out_i = sum_{j >= i} discount_factor^(j - i) * values[j]`` (a discounted sum to the end)."""
    if not values:
        return []
    return suffix_discounted(_row(values), discount_factor).tolist()


def compute_distill_reverse_kl(
    teacher_logprobs: list[float],
    student_logprobs: list[float],
    clip_min: float,
    clip_max: float,
    kl_penalty_coef: float = 1.0,
    kl_discount_factor: float = 0.0,
) -> list[float]:
    """Per-token advantages ``clip(kl_penalty_coef * (teacher - student))``, discounted first when asked.

    Lists of different lengths are cut to the shorter one (rLLM's behaviour at this path).
    """
    length = min(len(teacher_logprobs), len(student_logprobs))
    return reverse_kl_advantages(
        _row(list(teacher_logprobs)[:length]),
        _row(list(student_logprobs)[:length]),
        coef=kl_penalty_coef,
        discount=kl_discount_factor,
        clip_min=clip_min,
        clip_max=clip_max,
    ).values.tolist()


def _tokenizer_name(tokenizer: Any) -> str:
    return str(getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__)


async def compute_step_distill_advantage(
    step: Step,
    teacher_engine: Any,
    student_tokenizer: Any = None,
    teacher_tokenizer: Any = None,
    shared_tokenizer: bool = False,
    teacher_chat_parser: Any = None,
    teacher_prompt_fn: Callable[[list[dict]], list[dict]] | None = None,
    clip_min: float | None = None,
    clip_max: float | None = None,
    kl_penalty_coef: float = 1.0,
    kl_discount_factor: float = 0.0,
    visualize: bool = False,
) -> list[float]:
    """The distillation advantage of each response token of ``step``, scored by ``teacher_engine``.

    The teacher (an engine with ``async compute_logprobs(ids)``) scores the step's prompt and
    response ids; with ``teacher_prompt_fn`` it scores the response after the prompt that
    function makes of the step's messages (rendered by ``teacher_chat_parser``, encoded by
    ``teacher_tokenizer``), e.g. one that shows the teacher the answer. The student's
    log-probs are the step's ``logprobs``. ``visualize`` draws rLLM's cross-tokenizer
    alignment, which a shared tokenizer does not need; it is accepted and does nothing.
    """
    del visualize
    if not step.prompt_ids:
        raise WorkflowError("Distillation needs the step's prompt_ids; build the step from the engine's ModelOutput.")
    if not step.response_ids or not step.logprobs:
        raise WorkflowError(
            "Distillation needs the step's response_ids and logprobs (the sampled tokens and their log-probs); "
            "build the step from the engine's ModelOutput."
        )
    unknown = student_tokenizer is None or teacher_tokenizer is None
    if not (shared_tokenizer or unknown or same_vocabulary(student_tokenizer, teacher_tokenizer)):
        raise WorkflowError(
            f"The teacher's tokenizer {_tokenizer_name(teacher_tokenizer)!r} differs from the student's "
            f"{_tokenizer_name(student_tokenizer)!r}; distillation here needs one vocabulary (a teacher with the "
            "student's tokenizer)."
        )
    prompt = list(step.prompt_ids)
    if teacher_prompt_fn is not None:
        if teacher_chat_parser is None or teacher_tokenizer is None:
            raise WorkflowError("teacher_prompt_fn needs teacher_chat_parser and teacher_tokenizer (to render it).")
        if not step.chat_completions:
            raise WorkflowError("teacher_prompt_fn needs the step's chat_completions (its messages).")
        text = teacher_chat_parser.parse(
            teacher_prompt_fn(step.chat_completions[:-1]),
            is_first_msg=True,
            add_generation_prompt=True,
            tools=[],
            accumulate_reasoning=False,
        )
        prompt = list(teacher_tokenizer.encode(text, add_special_tokens=False))
    response = list(step.response_ids)
    scored = await teacher_engine.compute_logprobs(prompt + response)
    teacher = list(scored)[len(prompt) :]
    if len(teacher) != len(response):
        raise EngineCallError(
            f"The teacher engine {type(teacher_engine).__qualname__} scored {len(scored)} of "
            f"{len(prompt) + len(response)} ids; compute_logprobs returns one log-prob per id."
        )
    return compute_distill_reverse_kl(
        teacher,
        list(step.logprobs),
        clip_min=float("-inf") if clip_min is None else clip_min,
        clip_max=float("inf") if clip_max is None else clip_max,
        kl_penalty_coef=kl_penalty_coef,
        kl_discount_factor=kl_discount_factor,
    )
