"""What an OpenAI-style completion request asks ``rllm serve`` for, checked (see docs/serve.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rllm_transformers.engine import Sampling

KNOWN_KEYS = frozenset(
    {"model", "prompt", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "seed"}
    | {"n", "stop", "logprobs", "top_logprobs", "return_token_ids", "stream", "user"}
)
"""The request fields served; any other is refused rather than ignored."""
COMPLETION_MAX_TOKENS = 16
"""``/v1/completions``' default ``max_tokens`` (OpenAI's); chat defaults to the rest of the context."""


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
    sampling: Sampling
    greedy: bool
    n: int
    seed: int | None
    stop: list[str] = field(default_factory=list)
    logprobs: bool = False
    return_token_ids: bool = False


def _number(body: dict[str, Any], key: str, kind: type, default: Any, low: float, high: float | None = None) -> Any:
    value = body.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and not isinstance(value, int)):
        raise RequestError(f"{key} must be {'an integer' if kind is int else 'a number'}, got {value!r}.", key)
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f">= {low}"
        raise RequestError(f"{key} must be {bound}, got {value!r}.", key)
    return kind(value)


def parse(body: dict[str, Any], prompt_ids: list[int], chat: bool, context_limit: int) -> Params:
    """The request's sampling settings, checked against OpenAI's and vLLM's ranges and the context limit."""
    unknown = sorted(set(body) - KNOWN_KEYS)
    if unknown:
        raise RequestError(
            f"rllm serve does not support {', '.join(unknown)}; leave it out of the request.", unknown[0]
        )
    if body.get("stream"):
        raise RequestError("rllm serve does not stream; send stream=false (the default).", "stream")
    if not prompt_ids:
        raise RequestError("The prompt is empty; give at least one token.", "messages" if chat else "prompt")
    room = context_limit - len(prompt_ids)
    default = room if chat else COMPLETION_MAX_TOKENS
    key = "max_completion_tokens" if chat and body.get("max_completion_tokens") is not None else "max_tokens"
    max_tokens = _number(body, key, int, default, 1)
    if len(prompt_ids) + max_tokens > context_limit:
        raise RequestError(
            f"This model's maximum context length is {context_limit} tokens. However, you requested "
            f"{len(prompt_ids) + max_tokens} tokens ({len(prompt_ids)} in the prompt, {max_tokens} in the "
            f"completion); reduce the prompt or {key}.",
            key,
            code="context_length_exceeded",
        )
    temperature = _number(body, "temperature", float, 1.0, 0.0, 2.0)
    top_p = _number(body, "top_p", float, 1.0, 0.0, 1.0)
    if top_p == 0:
        raise RequestError("top_p must be above 0 (1 keeps every token).", "top_p")
    top_k = _number(body, "top_k", int, 0, -1)
    stop = body.get("stop") or []
    stop = [stop] if isinstance(stop, str) else stop
    if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop):
        raise RequestError("stop must be a non-empty string or a list of them.", "stop")
    if chat:
        logprobs = body.get("logprobs") or False
        top = _number(body, "top_logprobs", int, 0, 0)
    else:
        top = _number(body, "logprobs", int, None, 0)
        logprobs = top is not None
    if not isinstance(logprobs, bool):
        raise RequestError(f"logprobs must be true or false, got {logprobs!r}.", "logprobs")
    if top:
        raise RequestError(
            "alternatives to the sampled token are not returned by rllm serve; ask for "
            + ("logprobs=true with top_logprobs=0" if chat else "logprobs=0")
            + " to get each sampled token's log-prob.",
            "top_logprobs" if chat else "logprobs",
        )
    return Params(
        prompt_ids=prompt_ids,
        max_tokens=max_tokens,
        sampling=Sampling(temperature or 1.0, top_p, max(top_k, 0)),
        greedy=temperature == 0,
        n=_number(body, "n", int, 1, 1, 128),
        seed=_number(body, "seed", int, None, 0),
        stop=stop,
        logprobs=logprobs,
        return_token_ids=bool(body.get("return_token_ids", False)),
    )
