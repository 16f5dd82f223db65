"""OpenAI's completion API as rllm's servers speak it: requests checked, answers shaped (see docs/serve.md).

``rllm serve`` (the transformers plugin's server) and the trainer's gateway
(:mod:`rllm.gateway.server`) both read requests with :func:`parse` and the helpers below, and
answer with :func:`answer_body`, so a client sees one dialect:
OpenAI's fields, token ids and log-probs under vLLM's names (``return_token_ids``,
``prompt_token_ids``, ``token_ids``), errors as OpenAI's ``{"error": {...}}`` body.
Pure Python: the servers bring their own HTTP layer.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rllm.contract.keys import ConfigKey
from rllm.contract.sampling import TEMPERATURE_KEY, TOP_P_KEY
from rllm.errors import ConfigError

__all__ = [
    "COMPLETION_MAX_TOKENS",
    "KNOWN_KEYS",
    "SEED_MAX",
    "TEMPERATURE_KEY",
    "TOP_P_KEY",
    "Choice",
    "Params",
    "RequestError",
    "answer_body",
    "check_fields",
    "logprobs_of",
    "max_tokens_of",
    "number",
    "parse",
    "sampling_value",
]

KNOWN_KEYS = frozenset(
    {"model", "prompt", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "seed"}
    | {"n", "stop", "logprobs", "top_logprobs", "return_token_ids", "stream", "user"}
)
"""The request fields served; any other is refused rather than ignored."""
COMPLETION_MAX_TOKENS = 16
"""``/v1/completions``' default ``max_tokens`` (OpenAI's); chat defaults to the rest of the context."""
SEED_MAX = 2**64 - 1
"""The largest seed: a served request's random stream is keyed by 64 bits."""


class RequestError(Exception):
    """A request the server refuses: an OpenAI-shaped error body with this status."""

    def __init__(self, message: str, param: str | None = None, status: int = 400, code: str | None = None) -> None:
        super().__init__(message)
        self.param, self.status, self.code = param, status, code

    def body(self) -> dict[str, Any]:
        kind = "invalid_request_error" if self.status < 500 else "internal_error"
        return {"error": {"message": str(self), "type": kind, "param": self.param, "code": self.code}}


@dataclass
class Params:
    """What one request asks for, checked."""

    prompt_ids: list[int]
    max_tokens: int
    temperature: float
    top_p: float
    top_k: int
    """0: no top-k cut."""
    greedy: bool
    """``temperature=0``: argmax."""
    n: int
    seed: int | None
    stop: list[str] = field(default_factory=list)
    logprobs: bool = False
    return_token_ids: bool = False


@dataclass
class Choice:
    """One answer to a request: its text, the sampled ids and their log-probs, and why it stopped."""

    text: str
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str | None


def number(body: dict[str, Any], key: str, kind: type, default: Any, low: float, high: float | None = None) -> Any:
    """``body[key]`` as ``kind`` within ``[low, high]`` (absent or null: ``default``), else a :class:`RequestError`."""
    value = body.get(key, default)
    if value is None:
        return default
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or (kind is int and not isinstance(value, int))
        or not math.isfinite(value)
    ):
        raise RequestError(f"{key} must be {'an integer' if kind is int else 'a finite number'}, got {value!r}.", key)
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f">= {low}"
        raise RequestError(f"{key} must be {bound}, got {value!r}.", key)
    return kind(value)


def sampling_value(body: dict[str, Any], key: ConfigKey, hint: str = "") -> float:
    """``body[key.name]`` checked by ``key`` (``TEMPERATURE_KEY``, ``TOP_P_KEY``: the run's keys' own checks);
    absent or null: its default."""
    value = body.get(key.name)
    if value is None:
        return float(key.default)
    try:
        return float(key.check(value))
    except ConfigError as exc:
        raise RequestError(f"{exc}{hint}", key.name) from None


def check_fields(body: dict[str, Any], server: str, known: frozenset[str] = KNOWN_KEYS) -> None:
    """Refuse a field outside ``known`` (naming it) and streaming, which ``server`` does not do."""
    unknown = sorted(set(body) - known)
    if unknown:
        raise RequestError(f"{server} does not support {', '.join(unknown)}; leave it out of the request.", unknown[0])
    if body.get("stream"):
        raise RequestError(f"{server} does not stream; send stream=false (the default).", "stream")


def max_tokens_of(body: dict[str, Any], chat: bool, default: int) -> tuple[str, int]:
    """The completion's token limit and the field that gave it (chat's ``max_completion_tokens`` first)."""
    key = "max_completion_tokens" if chat and body.get("max_completion_tokens") is not None else "max_tokens"
    return key, number(body, key, int, default, 1)


def logprobs_of(body: dict[str, Any], chat: bool, server: str) -> bool:
    """Whether each sampled token's log-prob is asked for; alternatives (top log-probs) are refused."""
    if chat:
        logprobs = body.get("logprobs") or False
        top = number(body, "top_logprobs", int, 0, 0)
    else:
        top = number(body, "logprobs", int, None, 0)
        logprobs = top is not None
    if not isinstance(logprobs, bool):
        raise RequestError(f"logprobs must be true or false, got {logprobs!r}.", "logprobs")
    if top:
        raise RequestError(
            f"alternatives to the sampled token are not returned by {server}; ask for "
            + ("logprobs=true with top_logprobs=0" if chat else "logprobs=0")
            + " to get each sampled token's log-prob.",
            "top_logprobs" if chat else "logprobs",
        )
    return logprobs


def parse(body: dict[str, Any], prompt_ids: list[int], chat: bool, context_limit: int) -> Params:
    """The request's sampling settings, checked against OpenAI's and vLLM's ranges and the context limit."""
    server = "rllm serve"
    check_fields(body, server)
    if not prompt_ids:
        raise RequestError("The prompt is empty; give at least one token.", "messages" if chat else "prompt")
    room = context_limit - len(prompt_ids)
    if room < 1:  # nothing left to sample, whatever max_tokens says (null or absent included)
        raise RequestError(
            f"This model's maximum context length is {context_limit} tokens. However, the prompt has "
            f"{len(prompt_ids)} tokens, which leaves none for the completion; reduce the prompt.",
            "messages" if chat else "prompt",
            code="context_length_exceeded",
        )
    key, max_tokens = max_tokens_of(body, chat, room if chat else COMPLETION_MAX_TOKENS)
    if len(prompt_ids) + max_tokens > context_limit:
        raise RequestError(
            f"This model's maximum context length is {context_limit} tokens. However, you requested "
            f"{len(prompt_ids) + max_tokens} tokens ({len(prompt_ids)} in the prompt, {max_tokens} in the "
            f"completion); reduce the prompt or {key}.",
            key,
            code="context_length_exceeded",
        )
    greedy = body.get("temperature") == 0 and not isinstance(body.get("temperature"), bool)
    temperature = 0.0 if greedy else sampling_value(body, TEMPERATURE_KEY, " Give 0 for greedy sampling.")
    top_p = sampling_value(body, TOP_P_KEY)
    top_k = number(body, "top_k", int, 0, -1)
    stop = body.get("stop") or []
    stop = [stop] if isinstance(stop, str) else stop
    if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop):
        raise RequestError("stop must be a non-empty string or a list of them.", "stop")
    return Params(
        prompt_ids=prompt_ids,
        max_tokens=max_tokens,
        temperature=temperature or 1.0,
        top_p=top_p,
        top_k=max(top_k, 0),
        greedy=greedy,
        n=number(body, "n", int, 1, 1, 128),
        seed=number(body, "seed", int, None, 0, SEED_MAX),
        stop=stop,
        logprobs=logprobs_of(body, chat, server),
        return_token_ids=bool(body.get("return_token_ids", False)),
    )


Decode = Callable[[list[int]], str]
"""One token id's text (the tokenizer's ``decode``)."""


def answer_body(
    chat: bool,
    model: str,
    prompt_ids: list[int],
    choices: Sequence[Choice],
    decode: Decode,
    logprobs: bool,
    return_token_ids: bool,
    weight_version: int | None,
) -> dict[str, Any]:
    """The answer of ``/v1/chat/completions`` (``chat``: an assistant message per choice) or ``/v1/completions``.

    Each choice's ids and the prompt's are added when asked for (``return_token_ids``), where
    vLLM puts them: on each choice for completions, on the answer for chat.
    """
    shaped = []
    for index, choice in enumerate(choices):
        item: dict[str, Any] = {"index": index}
        if chat:
            item["message"] = {"role": "assistant", "content": choice.text}
            item["logprobs"] = _chat_logprobs(choice, decode) if logprobs else None
        else:
            item["text"] = choice.text
            item["logprobs"] = _completion_logprobs(choice, decode) if logprobs else None
        item["finish_reason"] = choice.finish_reason
        if return_token_ids:
            if not chat:
                item["prompt_token_ids"] = prompt_ids
            item["token_ids"] = choice.token_ids
        shaped.append(item)
    kind = ("chatcmpl", "chat.completion") if chat else ("cmpl", "text_completion")
    body = _envelope(*kind, model, prompt_ids, shaped, choices, weight_version)
    if chat and return_token_ids:
        body["prompt_token_ids"] = prompt_ids
    return body


def _envelope(
    prefix: str,
    kind: str,
    model: str,
    prompt_ids: list[int],
    shaped: list[dict[str, Any]],
    choices: Sequence[Choice],
    weight_version: int | None,
) -> dict[str, Any]:
    completion = sum(len(choice.token_ids) for choice in choices)
    return {
        "id": f"{prefix}-{uuid.uuid4().hex}",
        "object": kind,
        "created": int(time.time()),
        "model": model,
        "choices": shaped,
        "usage": {
            "prompt_tokens": len(prompt_ids),
            "completion_tokens": completion,
            "total_tokens": len(prompt_ids) + completion,
        },
        "weight_version": weight_version,
    }


def _completion_logprobs(choice: Choice, decode: Decode) -> dict[str, Any]:
    tokens = [decode([token]) for token in choice.token_ids]
    offsets, at = [], 0
    for piece in tokens:
        offsets.append(at)
        at += len(piece)
    return {"tokens": tokens, "token_logprobs": choice.logprobs, "top_logprobs": None, "text_offset": offsets}


def _chat_logprobs(choice: Choice, decode: Decode) -> dict[str, Any]:
    content = []
    for token, logprob in zip(choice.token_ids, choice.logprobs, strict=True):
        piece = decode([token])
        content.append({"token": piece, "logprob": logprob, "bytes": list(piece.encode()), "top_logprobs": []})
    return {"content": content}
