"""The rollout engine of ``rllm.backend=tinker``: workflows sample through a Tinker ``SamplingClient``.

Token in, token out: the prompt ids go to the server as they are and the reply's ids and
log-probs come back exactly as the server sampled them (no re-tokenising). Each call carries a
seed: an episode's view (:meth:`TinkerEngine.for_episode`) draws its calls' seeds from the
episode's seed, so what an episode samples does not depend on which episodes ran beside it.
After every update the backend swaps the sampling client (:meth:`TinkerEngine.swap`) and the
trainer's policy channel sets :attr:`weight_version`.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rllm.engine import (
    PROMPT_TOO_LONG,
    ConversationPrompts,
    EpisodeView,
    Generation,
    ModelOutput,
    RolloutEngine,
    TemplateChatParser,
    generation_output,
    template_ids,
)
from rllm.errors import DataError, EngineCallError
from rllm.types import TerminationEvent, TerminationReason

CHAT_OPTIONS = ("max_tokens", "application_id", "enforce_max_prompt_length")
"""What ``get_model_response`` takes besides the messages."""
SEED_LIMIT = 2**31 - 1
NO_SEQUENCE_IDS = "sample_sequence_ids"
"""What the tinker SDK (0.38) asserts every ``/api/v1/asample`` answer carries; servers of older SDKs leave it out."""


@dataclass(frozen=True)
class TinkerSampling:
    temperature: float
    top_p: float
    top_k: int
    max_new_tokens: int
    max_prompt_length: int | None
    greedy_validation: bool


class TinkerEngine(RolloutEngine):
    """Samples from the sampling client the backend last swapped in; see the module docstring."""

    def __init__(
        self, sampler: Any, tokenizer: Any, sampling: TinkerSampling, seed: int, base_url: str | None = None
    ) -> None:
        self.sampler = sampler
        self.base_url = base_url
        self.tokenizer = tokenizer
        self.sampling = sampling
        self.is_validation = False
        self.weight_version = 0
        self.rng = random.Random(seed)
        self.chat_parser = None if tokenizer is None else TemplateChatParser(tokenizer)
        self.eos = None if tokenizer is None else tokenizer.eos_token_id

    @property
    def max_response_length(self) -> int:
        return self.sampling.max_new_tokens

    def swap(self, sampler: Any) -> None:
        """Sample from ``sampler`` from now on."""
        self.sampler = sampler

    def for_episode(self, seed: int) -> TinkerEpisode:
        return TinkerEpisode(self, random.Random(int(seed)))

    async def generate(self, prompt_ids: Sequence[int], max_tokens: int | None = None) -> Generation:
        return await self.submit(prompt_ids, max_tokens, self.rng)

    async def submit(
        self, prompt_ids: Sequence[int], max_tokens: int | None, rng: random.Random, enforce_prompt_limit: bool = True
    ) -> Generation:
        """One ``sample`` call: the reply to ``prompt_ids`` with the server's ids and log-probs, seeded from ``rng``."""
        from tinker import types

        prompt = [int(token) for token in prompt_ids]
        limit = self.sampling.max_prompt_length
        if enforce_prompt_limit and limit is not None and len(prompt) > limit:
            return Generation([], [], "", PROMPT_TOO_LONG, prompt, self.weight_version)
        if not prompt:
            raise DataError("engine.generate() got an empty prompt; give at least one token id.")
        most = (
            self.sampling.max_new_tokens if max_tokens is None else min(int(max_tokens), self.sampling.max_new_tokens)
        )
        greedy = self.is_validation and self.sampling.greedy_validation
        params = types.SamplingParams(
            max_tokens=max(most, 1),
            temperature=0.0 if greedy else self.sampling.temperature,
            top_p=self.sampling.top_p,
            top_k=self.sampling.top_k if self.sampling.top_k > 0 else -1,
            seed=rng.randrange(SEED_LIMIT),
            stop=None if self.eos is None else [int(self.eos)],
        )
        version = self.weight_version
        try:
            answer = await self.sampler.sample(types.ModelInput.from_ints(prompt), 1, params)
        except AssertionError as exc:  # the SDK's own check of the server's answer, not rllm's
            if NO_SEQUENCE_IDS not in str(exc):
                raise
            raise EngineCallError(
                f"Tinker server {self.base_url}: /api/v1/asample answered without {NO_SEQUENCE_IDS}, which the "
                "installed tinker SDK requires: the server speaks an older Tinker protocol (skyrl 0.4.0 pairs with "
                "tinker 0.25); serve with a server that supports tinker 0.38 (docs/tinker.md, SkyRL)."
            ) from None
        sequence = answer.sequences[0]
        tokens = [int(t) for t in sequence.tokens]
        logprobs = [float(lp) for lp in (sequence.logprobs or [])]
        if len(logprobs) != len(tokens):
            raise EngineCallError(
                f"The Tinker server answered sample with {len(logprobs)} log-probs for {len(tokens)} tokens; the "
                "trainer needs one per sampled token."
            )
        reason = "stop" if sequence.stop_reason == "stop" else "length"
        text = "" if self.tokenizer is None else self.tokenizer.decode(tokens, skip_special_tokens=True)
        return Generation(tokens, logprobs, text, reason, prompt, version)

    def chat_ids(
        self, messages: Sequence[dict[str, Any]], conversation: ConversationPrompts | None = None
    ) -> list[int]:
        if self.tokenizer is None or getattr(self.tokenizer, "chat_template", None) is None:
            raise DataError(
                "get_model_response() renders messages with the tokenizer's chat template: set rllm.tinker.tokenizer "
                "to the served model's tokenizer (with a chat template), or call generate(prompt_ids)."
            )
        return template_ids(self.tokenizer, messages) if conversation is None else conversation.prompt_ids(messages)

    async def respond(
        self,
        messages: list[dict[str, Any]],
        rng: random.Random,
        conversation: ConversationPrompts | None = None,
        **kwargs: Any,
    ) -> ModelOutput:
        """rLLM's chat call: the chat template's prompt ids, sampled by the server, as a :class:`ModelOutput`."""
        unknown = sorted(set(kwargs) - set(CHAT_OPTIONS))
        if unknown:
            raise EngineCallError(
                f"get_model_response got {', '.join(map(repr, unknown))}, which the tinker engine does not take; it "
                f"takes {', '.join(CHAT_OPTIONS)} (sampling settings are the run's rllm.tinker.* keys)."
            )
        prompt = self.chat_ids(messages, conversation)
        enforce = bool(kwargs.get("enforce_max_prompt_length", True))
        generation = await self.submit(prompt, kwargs.get("max_tokens"), rng, enforce_prompt_limit=enforce)
        if generation.finish_reason == PROMPT_TOO_LONG:
            raise TerminationEvent(TerminationReason.MAX_PROMPT_LENGTH_EXCEEDED)
        if conversation is not None:
            conversation.sampled(generation.prompt_ids, generation.response_ids)
        return self.model_output(generation)

    @staticmethod
    def model_output(generation: Generation) -> ModelOutput:
        return generation_output(generation)

    async def _get_model_response(self, messages: list[dict[str, Any]], **kwargs: Any) -> ModelOutput:
        return await self.respond(messages, self.rng, **kwargs)

    async def get_token_output_from_token_input(self, token_input: Sequence[int], **kwargs: Any) -> Generation:
        unknown = sorted(set(kwargs) - {"max_tokens", "application_id"})
        if unknown:
            raise EngineCallError(
                f"get_token_output_from_token_input got {', '.join(map(repr, unknown))}, which the tinker engine does "
                "not take; it takes max_tokens and application_id."
            )
        return await self.submit(token_input, kwargs.get("max_tokens"), self.rng)

    def assemble_model_output(self, token_input: Sequence[int], token_output: Generation) -> ModelOutput:
        return self.model_output(token_output)

    @property
    def supports_token_in_token_out(self) -> bool:
        return True


class TinkerEpisode(EpisodeView):
    """One episode's view of a :class:`TinkerEngine`: the engine's sampler, the episode's seeds."""

    engine: TinkerEngine

    def __init__(self, engine: TinkerEngine, rng: random.Random) -> None:
        super().__init__(engine)
        self.rng = rng
        self.chat_parser = engine.chat_parser
        self.conversation = (
            None if engine.tokenizer is None else ConversationPrompts(engine.tokenizer, engine.chat_parser)
        )

    @property
    def max_response_length(self) -> int:
        return self.engine.max_response_length

    async def generate(self, prompt_ids: Sequence[int], max_tokens: int | None = None) -> Generation:
        return await self.engine.submit(prompt_ids, max_tokens, self.rng)

    async def _get_model_response(self, messages: list[dict[str, Any]], **kwargs: Any) -> ModelOutput:
        return await self.engine.respond(messages, self.rng, self.conversation, **kwargs)

    async def get_token_output_from_token_input(self, token_input: Sequence[int], **kwargs: Any) -> Generation:
        return await self.engine.submit(token_input, kwargs.get("max_tokens"), self.rng)

    def assemble_model_output(self, token_input: Sequence[int], token_output: Generation) -> ModelOutput:
        return self.engine.model_output(token_output)
