"""One episode's view of an :class:`~rllm.engine.rollout.openai_engine.OpenAIEngine`.

The view sticks to one server (its session id picks it, and is sent as the request's ``user``)
and seeds each request from the episode's seed, so a server that honours ``seed`` samples the
same episode whatever else it serves.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rllm.engine.chat import ConversationPrompts
from rllm.engine.rollout.rollout_engine import EpisodeView, Generation, ModelOutput

if TYPE_CHECKING:
    from rllm.engine.rollout.openai_engine import OpenAIEngine

__all__ = ["OpenAIEpisodeView"]


class OpenAIEpisodeView(EpisodeView):
    """One episode's view of an :class:`OpenAIEngine`: its server, its session id, its stream of request seeds."""

    engine: OpenAIEngine

    def __init__(self, engine: OpenAIEngine, session: str, seed: int) -> None:
        super().__init__(engine)
        self.session = session
        self.first: int | None = seed
        self.rng = random.Random(seed)
        self.conversation = (
            None if engine.tokenizer is None else ConversationPrompts(engine.tokenizer, engine.prompt_parser)
        )

    def _seed(self) -> int:
        if self.first is not None:
            seed, self.first = self.first, None
            return seed
        return self.rng.getrandbits(63)

    async def generate(self, prompt_ids: Sequence[int], max_tokens: int | None = None) -> Generation:
        return await self.engine.sample_ids(prompt_ids, max_tokens, self.session, self._seed())

    async def _get_model_response(self, messages: list[dict[str, Any]], **kwargs: Any) -> ModelOutput:
        return await self.engine.respond(messages, self.session, self._seed(), self.conversation, **kwargs)

    async def get_token_output_from_token_input(self, token_input: Sequence[int], **kwargs: Any) -> Generation:
        return await self.engine.token_output(token_input, self.session, self._seed(), **kwargs)

    def assemble_model_output(self, token_input: Sequence[int], token_output: Generation) -> ModelOutput:
        return self.engine.model_output(token_output)
