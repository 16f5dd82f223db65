"""A rollout engine whose answers are written out by hand: the gateway's tests check against these numbers."""

from __future__ import annotations

from typing import Any

from rllm.engine import ModelOutput, RolloutEngine
from rllm.engine.chat import completion_output
from rllm.errors import EngineCallError

REPLY = "Answer: 7"
REPLY_IDS = [ord(c) for c in REPLY]
REPLY_LOGPROBS = [-0.25 * (i + 1) for i in range(len(REPLY))]
"""-0.25, -0.5, ... : one per reply character, as the script samples them."""


class CharTokenizer:
    """One id per character (its code point)."""

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [ord(c) for c in text]

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return "".join(chr(i) for i in ids)


class Scripted(RolloutEngine):
    """Answers every call with :data:`REPLY`; the prompt ids are the last message's characters."""

    tokenizer = CharTokenizer()

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    async def _get_model_response(self, messages: list[dict[str, Any]], **kwargs: Any) -> ModelOutput:
        unknown = sorted(set(kwargs) - {"max_tokens"})
        if unknown:
            raise EngineCallError(f"Scripted does not take {', '.join(unknown)}")
        self.calls.append(kwargs)
        prompt = [ord(c) for c in messages[-1]["content"]]
        ids = REPLY_IDS[: kwargs.get("max_tokens", len(REPLY_IDS))]
        return completion_output(
            REPLY[: len(ids)],
            prompt_ids=prompt,
            completion_ids=ids,
            logprobs=REPLY_LOGPROBS[: len(ids)],
            finish_reason="stop",
        )

    @property
    def supports_token_in_token_out(self) -> bool:
        return True

    async def get_token_output_from_token_input(self, token_input: list[int], **kwargs: Any) -> list[int]:
        self.calls.append(kwargs)
        return REPLY_IDS[: kwargs["max_tokens"]]

    def assemble_model_output(self, token_input: list[int], token_output: list[int]) -> ModelOutput:
        return completion_output(
            "".join(map(chr, token_output)),
            prompt_ids=token_input,
            completion_ids=token_output,
            logprobs=REPLY_LOGPROBS[: len(token_output)],
            finish_reason="length",
        )
