"""Numbers read from an inference server's answer, checked where they are read.

A server is another process: what it answers is input, not a result of ours. A NaN, infinite,
positive or boolean log-prob would enter the importance weights (or be hidden by a
``nan_to_num``), a token id outside the vocabulary would index past the embedding, a
``max_model_len`` of 1 would end every episode as "prompt too long". Each reader here takes the
URL and the field it reads, and raises a one-line :class:`~rllm.errors.InferenceServerError`
naming both.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from rllm.engine.rollout.http import Answer
from rllm.errors import InferenceServerError

__all__ = ["ENABLE_IDS", "LOGPROB_ROUNDING", "check_sampled", "first_choice", "integer", "log_probs", "token_ids"]

ENABLE_IDS = (
    "it must support vLLM's return_token_ids (vLLM >= 0.10.2 and rllm serve do; SGLang and OpenAI's API do not)"
)
"""What a server that answers without the sampled ids lacks."""

LOGPROB_ROUNDING = 1e-3
"""A log-prob above 0 by at most this much is float rounding of a near-certain token (a float32 log-softmax
gives ``+6e-8``) and is read as 0.0; anything larger is refused: no probability exceeds 1."""


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def log_probs(values: Sequence[Any], url: str, field: str, suffix: str = "") -> list[float]:
    """``values`` as finite log-probs <= 0 (rounding above 0 read as 0), else an error naming ``field[j]suffix``."""
    checked = []
    for index, value in enumerate(values):
        if not _is_number(value) or not math.isfinite(value) or value > LOGPROB_ROUNDING:
            raise InferenceServerError(
                f"{url} answered {field}[{index}]{suffix} = {value!r}; a log-prob must be a finite number <= 0, so its "
                "answers cannot be trained on."
            )
        checked.append(min(float(value), 0.0))
    return checked


def token_ids(value: Any, url: str, field: str, vocab: int | None) -> list[int]:
    """``value`` as token ids in ``0..vocab-1`` (``vocab`` None: only >= 0), else an error naming ``field``."""
    if value is None:
        raise InferenceServerError(f"{url} answered without {field}; {ENABLE_IDS}.")
    if not isinstance(value, list):
        raise InferenceServerError(f"{url} answered {field} that are not a list of token ids.")
    for index, token in enumerate(value):
        if not isinstance(token, int) or isinstance(token, bool) or token < 0 or (vocab is not None and token >= vocab):
            within = f"0..{vocab - 1}" if vocab is not None else ">= 0"
            raise InferenceServerError(
                f"{url} answered {field}[{index}] = {token!r}, which is not a token id ({within}, the trainer's "
                "tokenizer); serve the trained model."
            )
    return value


def integer(value: Any, url: str, field: str, low: int) -> int:
    """``value`` as an integer >= ``low`` (an integral float such as 4096.0 too), else an error naming ``field``."""
    if _is_number(value) and math.isfinite(value) and float(value).is_integer() and value >= low:
        return int(value)
    raise InferenceServerError(f"{url} answered {field} = {value!r}; it must be an integer >= {low}.")


def first_choice(answer: Answer, url: str) -> dict[str, Any]:
    """The answer's ``choices[0]``, else an error: it is not an OpenAI-compatible completion."""
    choices = answer.body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise InferenceServerError(f"{url} answered without choices; it is not an OpenAI-compatible completion.")
    return choices[0]


def check_sampled(ids: Sequence[int], logprobs: Sequence[float], limit: int, url: str) -> None:
    """Refuse an answer with other than one log-prob per sampled id, or more ids than ``limit`` (its max_tokens)."""
    if len(logprobs) != len(ids):
        raise InferenceServerError(
            f"{url} answered {len(ids)} token ids with {len(logprobs)} log-probs; it must give one log-prob per "
            "sampled token."
        )
    if len(ids) > limit:
        raise InferenceServerError(
            f"{url} answered {len(ids)} tokens when {limit} were asked for (max_tokens); the server does not "
            "honour max_tokens, so its answers cannot be trained on."
        )
