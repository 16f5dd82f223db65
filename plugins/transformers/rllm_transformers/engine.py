"""The rollout engine: workflows ``await generate(prompt_ids)`` one at a time, the engine answers them in batches.

Every call waits on the event loop until the concurrent workflows have all submitted theirs,
then one left-padded batch is sampled token by token with the model's KV cache. The
log-probability of each sampled token under the distribution it was drawn from (after
temperature, top-k and top-p) is returned with it. Each row's random numbers come from its own
request's stream, ``max_tokens`` uniforms drawn once per batch (:func:`~rllm_transformers.draws.row_uniforms`); an
episode's view (:meth:`TransformersEngine.for_episode`) seeds one from the episode's seed, so
what an episode samples does not depend on which episodes shared its batches, nor on the
executor that ran it. The draw itself (:func:`~rllm_transformers.draws.draw_rows`) runs on the model's device for the
whole batch: per token only the ``rows`` chosen ids leave it, and the first forward computes
the logits of each prompt's last position only. The engines here implement core's
:class:`rllm.engine.RolloutEngine`, as a server engine (an OpenAI-compatible vLLM or SGLang
endpoint) would; ``chat`` is this engine's own addition.

rLLM's text interface is here too: ``get_model_response(messages)`` renders the messages with
the tokenizer's chat template (a pretrained model's own; the text tokenizer's for ``tiny``),
samples in the same batches, and returns a :class:`~rllm.engine.ModelOutput` with the exact
sampled ids and their log-probs, the text split into content, reasoning and tool calls. A
prompt over ``max_prompt_length`` ends the episode (``MAX_PROMPT_LENGTH_EXCEEDED``).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from transformers import DynamicCache

from rllm.engine import (
    PROMPT_TOO_LONG,
    ConversationPrompts,
    EpisodeView,
    Generation,
    ModelOutput,
    RolloutEngine,
    TemplateChatParser,
    completion_output,
    template_ids,
)
from rllm.errors import DataError, EngineCallError
from rllm.types import TerminationEvent, TerminationReason
from rllm_transformers.draws import Sampling as Sampling  # the draws' names keep their import path here
from rllm_transformers.draws import UniformStream as UniformStream
from rllm_transformers.draws import draw_rows as draw_rows
from rllm_transformers.draws import row_uniforms as row_uniforms
from rllm_transformers.draws import sampling_log_probs as sampling_log_probs
from rllm_transformers.logprobs import score_tokens, takes_logits_to_keep
from rllm_transformers.model import set_training

CHAT_OPTIONS = (
    "max_tokens",
    "application_id",
    "skip_special_tokens",
    "accumulate_reasoning",
    "enforce_max_prompt_length",
)
"""What ``get_model_response`` takes besides the messages (``application_id`` names the caller only)."""


@dataclass
class SampleRequest:
    """One prompt waiting for a batch: what :meth:`TransformersEngine.sample` takes (``rllm serve`` queues them too)."""

    prompt_ids: list[int]
    max_tokens: int
    future: asyncio.Future[Generation]
    stream: UniformStream
    """Where this row's uniforms come from, ``max_tokens`` of them per call (the episode's, or the engine's own)."""


def keeps_last_logits(model: Any) -> bool:
    """Whether ``model``'s forward takes ``logits_to_keep`` (transformers' causal LMs; a PEFT wrapper passes it on)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return takes_logits_to_keep(base.forward)


class TransformersEngine(RolloutEngine):
    """Batched sampling from a transformers causal LM, in the trainer's process or a Ray worker (see ``workers``)."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        device: torch.device,
        stream: UniformStream,
        sampling: Sampling,
        max_new_tokens: int,
        max_prompt_length: int,
        greedy_validation: bool,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.device = device
        self.stream = stream
        self.sampling = sampling
        self.max_new_tokens = max_new_tokens
        self.max_prompt_length = max_prompt_length
        self.greedy_validation = greedy_validation
        self.is_validation = False
        self.chat_parser = TemplateChatParser(tokenizer)
        self._pending: list[SampleRequest] = []
        self._flush: asyncio.Task[None] | None = None
        self._token_texts: dict[int, str] = {}
        """Each single token's decoded text, once: a one-token reply is decoded by lookup (the tokenizer is fixed)."""

    @property
    def max_response_length(self) -> int:
        """rLLM's name for the most tokens one call returns (``rllm.transformers.max_new_tokens``)."""
        return self.max_new_tokens

    def for_episode(self, seed: int) -> EpisodeEngine:
        """A view for one episode: batched with the others, sampling from a stream keyed by ``seed``."""
        return EpisodeEngine(self, UniformStream(seed))

    def for_workers(self) -> RolloutEngine:
        """What a Ray worker gets once per batch: a snapshot of the weights and settings that samples there."""
        from rllm_transformers.workers import WorkerEngine

        return WorkerEngine.snapshot(self)

    async def chat(self, messages: Sequence[dict[str, str]], max_tokens: int | None = None) -> Generation:
        return await self.generate(self.chat_ids(messages), max_tokens)

    async def generate(self, prompt_ids: Sequence[int], max_tokens: int | None = None) -> Generation:
        """Sampled from the engine's own stream; workflows run by the trainer sample from their episode's view."""
        return await self.submit(prompt_ids, max_tokens, self.stream)

    async def compute_logprobs(self, ids: Sequence[int]) -> list[float]:
        """One forward pass at temperature 1: each token's log-prob after those before it (the first: 0.0).

        No entropy: no caller reads one, and at a real vocabulary it is one more pass over every position's logits.
        """
        with torch.no_grad():
            row = torch.tensor([list(ids)], dtype=torch.long, device=self.device)
            chosen = score_tokens(self.model, row, torch.ones_like(row)).log_probs
        return [0.0, *chosen[0].tolist()] if len(ids) else []

    def chat_ids(
        self, messages: Sequence[dict[str, str]], conversation: ConversationPrompts | None = None, **variables: Any
    ) -> list[int]:
        """The prompt ids of ``messages`` under the tokenizer's chat template (extending ``conversation``'s turns)."""
        if getattr(self.tokenizer, "chat_template", None) is None:
            raise DataError(
                "get_model_response() and chat() render messages with the tokenizer's chat template, and "
                "rllm.transformers.model's tokenizer has none: use rllm.transformers.tokenizer=text (model=tiny), a "
                "model directory whose tokenizer has a chat template, or call generate(prompt_ids) with ids you build."
            )
        if conversation is None:
            return template_ids(self.tokenizer, messages, **variables)
        return conversation.prompt_ids(messages, **variables)

    async def respond(
        self,
        messages: list[dict[str, Any]],
        stream: UniformStream,
        conversation: ConversationPrompts | None = None,
        **kwargs: Any,
    ) -> ModelOutput:
        """rLLM's chat call: the chat template's prompt, sampled from ``stream``, as a :class:`ModelOutput`.

        ``enforce_max_prompt_length=False`` (rLLM's cumulative workflow, which keeps its own
        budget) lifts ``max_prompt_length`` for the call; ``accumulate_reasoning`` reaches the
        chat template as its variable.
        """
        unknown = sorted(set(kwargs) - set(CHAT_OPTIONS))
        if unknown:
            raise EngineCallError(
                f"get_model_response got {', '.join(map(repr, unknown))}, which the transformers engine does not take; "
                f"it takes {', '.join(CHAT_OPTIONS)} (temperature, top_p and top_k are the run's "
                "rllm.transformers.* settings)."
            )
        variables = {key: bool(kwargs[key]) for key in ("accumulate_reasoning",) if key in kwargs}
        prompt = self.chat_ids(messages, conversation, **variables)
        enforce = bool(kwargs.get("enforce_max_prompt_length", True))
        generation = await self.submit(prompt, kwargs.get("max_tokens"), stream, enforce_prompt_limit=enforce)
        if conversation is not None and generation.finish_reason != PROMPT_TOO_LONG:
            conversation.sampled(generation.prompt_ids, generation.response_ids)
        return self.model_output(generation, skip_special_tokens=bool(kwargs.get("skip_special_tokens", True)))

    def model_output(self, generation: Generation, skip_special_tokens: bool = True) -> ModelOutput:
        """The :class:`ModelOutput` of one sampled generation; a prompt that was too long ends the episode."""
        if generation.finish_reason == PROMPT_TOO_LONG:
            raise TerminationEvent(TerminationReason.MAX_PROMPT_LENGTH_EXCEEDED)
        text = generation.text
        if not skip_special_tokens:
            text = self.tokenizer.decode(generation.response_ids, skip_special_tokens=False)
        return completion_output(
            text,
            prompt_ids=generation.prompt_ids,
            completion_ids=generation.response_ids,
            logprobs=generation.logprobs,
            finish_reason=generation.finish_reason,
        )

    async def token_output(self, token_input: Sequence[int], stream: UniformStream, **kwargs: Any) -> Generation:
        """rLLM's token-in/token-out call: the :class:`Generation` of ``token_input`` (``max_tokens`` only)."""
        unknown = sorted(set(kwargs) - {"max_tokens", "application_id"})
        if unknown:
            raise EngineCallError(
                f"get_token_output_from_token_input got {', '.join(map(repr, unknown))}, which the transformers engine "
                "does not take; it takes max_tokens and application_id."
            )
        return await self.submit(token_input, kwargs.get("max_tokens"), stream)

    async def _get_model_response(self, messages: list[dict[str, Any]], **kwargs: Any) -> ModelOutput:
        return await self.respond(messages, self.stream, **kwargs)

    async def get_token_output_from_token_input(self, token_input: Sequence[int], **kwargs: Any) -> Generation:
        return await self.token_output(token_input, self.stream, **kwargs)

    def assemble_model_output(self, token_input: Sequence[int], token_output: Generation) -> ModelOutput:
        return self.model_output(token_output)

    @property
    def supports_token_in_token_out(self) -> bool:
        return True

    async def submit(
        self,
        prompt_ids: Sequence[int],
        max_tokens: int | None,
        stream: UniformStream,
        enforce_prompt_limit: bool = True,
    ) -> Generation:
        """Queue one prompt for the next batch; its tokens are drawn from ``stream``."""
        prompt = [int(token) for token in prompt_ids]
        if enforce_prompt_limit and len(prompt) > self.max_prompt_length:
            return Generation([], [], "", PROMPT_TOO_LONG, prompt)
        if not prompt:
            raise DataError("engine.generate() got an empty prompt; give at least one token id.")
        future: asyncio.Future[Generation] = asyncio.get_running_loop().create_future()
        limit = self.max_new_tokens if max_tokens is None else min(int(max_tokens), self.max_new_tokens)
        self._pending.append(SampleRequest(prompt, max(limit, 1), future, stream))
        if self._flush is None or self._flush.done():
            self._flush = asyncio.ensure_future(self._run_when_quiet())
        return await future

    async def _run_when_quiet(self) -> None:
        """Yield until no new request arrived for a few turns of the loop, then answer all pending ones."""
        seen, quiet = -1, 0
        while quiet < 3:
            await asyncio.sleep(0)
            quiet = quiet + 1 if len(self._pending) == seen else 0
            seen = len(self._pending)
        requests, self._pending = self._pending, []
        try:
            generations = self.sample(requests)
        except BaseException as exc:
            for request in requests:
                if not request.future.done():
                    request.future.set_exception(exc)
            return
        for request, generation in zip(requests, generations, strict=True):
            if not request.future.done():
                request.future.set_result(generation)

    @torch.no_grad()
    def sample(self, requests: Sequence[SampleRequest]) -> list[Generation]:
        model, pad, eos = self.model, int(self.tokenizer.pad_token_id), self.tokenizer.eos_token_id
        greedy = self.is_validation and self.greedy_validation
        # identical prompts (a task's rollouts) are prefilled once and their cache rows copied: GRPO's n-fold prefill
        unique: dict[tuple[int, ...], int] = {}
        copies = [unique.setdefault(tuple(r.prompt_ids), len(unique)) for r in requests]
        lengths = np.array([len(prompt) for prompt in unique])
        width = int(lengths.max())
        # left padding: every prompt ends in the last column; a row-major fill takes the prompts in order
        filled = np.arange(width) >= width - lengths[:, None]
        rows = np.full((len(unique), width), pad, dtype=np.int64)
        rows[filled] = list(itertools.chain.from_iterable(unique))
        ids = torch.as_tensor(rows, device=self.device)
        mask = torch.as_tensor(filled.astype(np.int64), device=self.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        counts = [r.max_tokens for r in requests]
        limits = torch.tensor(counts, device=self.device)
        steps = max(counts)
        noise = None if greedy else row_uniforms([r.stream for r in requests], counts, self.device)
        # prefill: the LM head over each prompt's last position only ([rows, 1, vocab], not [rows, width, vocab])
        last_only = {"logits_to_keep": 1} if keeps_last_logits(model) else {}
        tokens = torch.full((len(requests), steps), pad, dtype=torch.long, device=self.device)
        logps = torch.zeros((len(requests), steps), device=self.device)
        alive = torch.ones(len(requests), dtype=torch.bool, device=self.device)
        stopped = torch.zeros(len(requests), dtype=torch.bool, device=self.device)
        # transformers' Cache API, filled in place by each forward; one token per row needs one forward and no cache
        cache = DynamicCache(config=model.config) if steps > 1 else None
        was_training = model.training
        set_training(model, False)
        try:
            logits = self._forward(ids, mask, positions, cache, last_only)
            if len(unique) < len(requests):
                rows_of = torch.tensor(copies, device=self.device)
                logits, mask, positions = logits[rows_of], mask[rows_of], positions[rows_of]
                if cache is not None:
                    cache.reorder_cache(rows_of)
            for t in range(steps):
                if noise is None:  # greedy validation
                    log_p = torch.log_softmax(logits.float(), dim=-1)
                    token = log_p.argmax(dim=-1)
                else:
                    log_p = sampling_log_probs(logits, self.sampling)
                    token = draw_rows(log_p, noise[:, t])
                tokens[:, t] = torch.where(alive, token, pad)
                logps[:, t] = log_p.gather(-1, token[:, None]).squeeze(-1)
                if eos is not None:
                    stopped |= alive & (token == eos)
                alive &= ~stopped & (t + 1 < limits)
                if not bool(alive.any()):
                    break
                # a finished row goes on unread; its mask stays 1, so a batch without padding keeps a mask of ones
                # (which spares the attention a mask)
                mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=-1)
                positions = positions[:, -1:] + 1
                logits = self._forward(tokens[:, t : t + 1], mask, positions, cache, last_only)
        finally:
            set_training(model, was_training)
        generations = []
        for request, row_tokens, row_logps, row_stopped in zip(
            requests, tokens.tolist(), logps.tolist(), stopped.tolist(), strict=True
        ):
            length = request.max_tokens
            response = row_tokens[:length]
            if eos is not None and eos in response:
                length = response.index(eos) + 1
                response = response[:length]
            text = self._text(response)
            reason = "stop" if row_stopped else "length"
            generations.append(
                Generation(response, row_logps[:length], text, reason, request.prompt_ids, self.weight_version)
            )
        return generations

    def _forward(
        self,
        ids: torch.Tensor,
        mask: torch.Tensor,
        positions: torch.Tensor,
        cache: DynamicCache | None,
        last_only: dict[str, int],
    ) -> torch.Tensor:
        """The next token's logits of every row (``[rows, vocab]``), extending ``cache`` when there is one."""
        out = self.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            past_key_values=cache,
            use_cache=cache is not None,
            **last_only,
        )
        return out.logits[:, -1, :]

    def _text(self, response: list[int]) -> str:
        """The reply's text without special tokens; a one-token reply's from the memo (``decode`` converts its ids
        through several type checks per call, and a batch of one-token replies made that a per-row cost)."""
        if len(response) != 1:
            return self.tokenizer.decode(response, skip_special_tokens=True)
        token = response[0]
        text = self._token_texts.get(token)
        if text is None:
            text = self._token_texts[token] = self.tokenizer.decode(response, skip_special_tokens=True)
        return text


class EpisodeEngine(EpisodeView):
    """One episode's view of a :class:`TransformersEngine`: the engine's batches, the episode's random stream."""

    engine: TransformersEngine

    def __init__(self, engine: TransformersEngine, stream: UniformStream) -> None:
        super().__init__(engine)
        self.stream = stream
        self.conversation = ConversationPrompts(engine.tokenizer, engine.chat_parser)
        self.chat_parser = engine.chat_parser

    @property
    def max_response_length(self) -> int:
        return self.engine.max_response_length

    async def _get_model_response(self, messages: list[dict[str, Any]], **kwargs: Any) -> ModelOutput:
        return await self.engine.respond(messages, self.stream, self.conversation, **kwargs)

    async def get_token_output_from_token_input(self, token_input: Sequence[int], **kwargs: Any) -> Generation:
        return await self.engine.token_output(token_input, self.stream, **kwargs)

    def assemble_model_output(self, token_input: Sequence[int], token_output: Generation) -> ModelOutput:
        return self.engine.model_output(token_output)

    async def generate(self, prompt_ids: Sequence[int], max_tokens: int | None = None) -> Generation:
        return await self.engine.submit(prompt_ids, max_tokens, self.stream)

    async def compute_logprobs(self, ids: Sequence[int]) -> list[float]:
        return await self.engine.compute_logprobs(ids)

    async def chat(self, messages: Sequence[dict[str, str]], max_tokens: int | None = None) -> Generation:
        return await self.engine.submit(self.engine.chat_ids(messages), max_tokens, self.stream)
