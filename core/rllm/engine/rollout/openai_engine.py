"""``OpenAIEngine`` (rLLM's name): rollouts sampled by any OpenAI-compatible server (``rllm serve``, vLLM, SGLang).

Token ids go in and come out: a prompt of ids is sent to ``/v1/completions`` as ids, and the answer must carry the
sampled ids and their log-probs in vLLM's names (``return_token_ids``: ``choices[0].token_ids``; ``logprobs``:
``choices[0].logprobs.token_logprobs``, or on ``/v1/chat/completions`` ``logprobs.content[j].logprob``). An answer
without them is a one-line :class:`~rllm.errors.InferenceServerError` naming the missing field: the engine never
trains on text it re-tokenised. Chat messages are rendered with the trainer's tokenizer and sent as ids
(``endpoint="completions"``, the default when a tokenizer with a chat template is given), or sent as messages to
``/v1/chat/completions`` (``endpoint="chat"``).

Each episode's view (:meth:`OpenAIEngine.for_episode`, ``openai_episode``) sticks to one server and seeds each
request from the episode's seed (``seed_requests=False`` sends no seed: vLLM's faster shared generator, episodes that
do not repeat); the views share the engine's chat-template cache. A request is retried and the servers are checked as
:mod:`~rllm.engine.rollout.openai_servers` says; when it fails, ``rllm.workflow.failure_policy`` decides. Requests run
in a pool of ``max_concurrency`` threads (the standard library's ``http.client``, no extra dependency), which bounds
how many are in flight. The context limit (the server's ``max_model_len``) is checked before a request is sent; a
prompt over ``max_prompt_length`` ends its episode as the in-process engines do.

A server that lost the policy's weights (killed and restarted, it comes back with its initial ones) is given them
again before the engine samples from it: when an answer reports another ``weight_version`` than the engine's, or, from
a server that reports none (vLLM), when a request got no answer before it got one, the engine calls its
:attr:`OpenAIEngine.resync` (the backend sets it to push the current weights to that server) and sends the request
again.
"""

from __future__ import annotations

import asyncio
import random
import threading
import uuid
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rllm.engine.chat import ConversationPrompts, TemplateChatParser, completion_output, generation_output, template_ids
from rllm.engine.rollout import answers
from rllm.engine.rollout.http import Answer
from rllm.engine.rollout.openai_episode import OpenAIEpisodeView
from rllm.engine.rollout.openai_servers import OpenAIServers
from rllm.engine.rollout.rollout_engine import PROMPT_TOO_LONG, Generation, ModelOutput, RolloutEngine
from rllm.errors import DataError, EngineCallError, InferenceServerError, RLLMWarning

__all__ = ["OpenAIEngine"]

CHAT_OPTIONS = ("max_tokens", "application_id", "temperature", "top_p", "top_k", "seed", "stop")
"""What ``get_model_response`` takes besides the messages."""
TOKEN_OPTIONS = ("max_tokens", "application_id", "seed")
"""What ``get_token_output_from_token_input`` takes besides the token ids."""


class OpenAIEngine(OpenAIServers, RolloutEngine):
    """A rollout engine over one or several OpenAI-compatible servers (see the module's docstring)."""

    def __init__(
        self,
        model: str | None = None,
        tokenizer: Any = None,
        chat_parser: Any = None,
        max_prompt_length: int = 4096,
        max_response_length: int = 4096,
        max_model_length: int | None = None,
        api_retries: int = 3,
        base_url: str | Sequence[str] = "http://127.0.0.1:8000/v1",
        api_key: str = "EMPTY",
        sampling_params: dict[str, Any] | None = None,
        *,
        timeout: float = 60.0,
        retry_backoff: float = 0.5,
        max_concurrency: int = 64,
        endpoint: str | None = None,
        greedy_validation: bool = False,
        seed: int = 0,
        seed_requests: bool = True,
    ) -> None:
        urls = [base_url] if isinstance(base_url, str) else list(base_url)
        if not urls or not all(isinstance(url, str) and url.startswith(("http://", "https://")) for url in urls):
            raise DataError(
                f"OpenAIEngine base_url {base_url!r}: give one or several http:// or https:// URLs ending in /v1."
            )
        if endpoint not in (None, "completions", "chat"):
            raise DataError(f"OpenAIEngine endpoint {endpoint!r}: give 'completions' or 'chat'.")
        self.base_urls = [url.rstrip("/") for url in urls]
        self.model = model
        self.tokenizer = tokenizer
        self.chat_parser = chat_parser
        self.prompt_parser = None if tokenizer is None else TemplateChatParser(tokenizer)
        self.max_prompt_length = int(max_prompt_length)
        self.max_response_length = int(max_response_length)
        self.max_model_length = max_model_length
        self.api_retries = int(api_retries)
        self.api_key = api_key
        self.sampling_params = dict(sampling_params or {})
        self.timeout = float(timeout)
        self.retry_backoff = float(retry_backoff)
        self.max_concurrency = int(max_concurrency)
        has_template = getattr(tokenizer, "chat_template", None) is not None
        self.endpoint = endpoint or ("completions" if has_template else "chat")
        self.greedy_validation = greedy_validation
        self.is_validation = False
        self.weight_version = 0
        self.rng = random.Random(seed)
        self.seed_requests = bool(seed_requests)
        """Whether requests carry a seed (``rllm.rollout.openai.seed_requests``); a caller's ``seed`` goes anyway."""
        self.requests = 0
        self._connected = False
        self._connecting = threading.Lock()
        self._pool_lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self.resync: Callable[[str], None] | None = None
        """Given a server's base URL, brings it back to the weights of ``weight_version`` (None: never asked)."""
        self.resyncs: dict[str, int] = {}
        """How many times each server was given the weights again after losing them."""
        self._resyncing = threading.Lock()

    @classmethod
    def from_config(
        cls,
        config: Any,
        tokenizer: Any,
        *,
        max_prompt_length: int,
        max_response_length: int,
        sampling_params: dict[str, Any],
        greedy_validation: bool,
        seed: int,
    ) -> OpenAIEngine:
        """The engine ``rllm.rollout.openai.*`` describes, connected (the servers checked) before training starts."""
        options = config.rllm.rollout.openai
        engine = cls(
            model=None if options.model is None else str(options.model),
            tokenizer=tokenizer,
            max_prompt_length=max_prompt_length,
            max_response_length=max_response_length,
            api_retries=int(options.max_retries),
            base_url=[str(url) for url in options.base_url],
            api_key=str(options.api_key),
            sampling_params=sampling_params,
            timeout=float(options.timeout),
            retry_backoff=float(options.retry_backoff),
            max_concurrency=int(options.max_concurrency),
            endpoint=str(options.endpoint),
            greedy_validation=greedy_validation,
            seed=seed,
            seed_requests=bool(options.seed_requests),
        )
        engine.connect()
        return engine

    # -- pickling (the Ray executor sends the engine to its workers) ---------------------------
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_connecting"] = state["_pool_lock"] = state["_pool"] = state["_resyncing"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._connecting, self._pool_lock, self._resyncing = threading.Lock(), threading.Lock(), threading.Lock()

    def shutdown(self) -> None:
        """Stop the request threads (a later request starts new ones)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    async def _call(self, server: str, url: str, body: dict[str, Any], session: str | None) -> Answer:
        if not self._connected:  # the first request of an engine built without from_config
            await asyncio.to_thread(self.connect)
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.max_concurrency, thread_name_prefix="rllm-openai")
            pool = self._pool
        self.requests += 1
        return await asyncio.get_running_loop().run_in_executor(pool, self._sample, server, url, body, session)

    def _sample(self, server: str, url: str, body: dict[str, Any], session: str | None) -> Answer:
        """A sampling request, sent again after :attr:`resync` when the server had lost the policy's weights."""
        for _ in range(2):
            seen = self.resyncs.get(server, 0)
            answer, unanswered = self._attempts(url, body, session)
            reported = answer.body.get("weight_version")
            if reported is not None:
                reported = answers.integer(reported, url, "weight_version", 0)
            lost = unanswered if reported is None else reported != self.weight_version
            if self.resync is None or not lost:
                return answer
            with self._resyncing:  # one push per loss, however many requests noticed it
                if self.resyncs.get(server, 0) == seen:
                    said = "no answer, then an answer" if reported is None else f"weight_version {reported}"
                    warnings.warn(
                        f"{server} lost the policy's weights ({said} where {self.weight_version} was expected: it "
                        "restarted); sending them again before sampling from it.",
                        RLLMWarning,
                        stacklevel=2,
                    )
                    self.resync(server)
                    self.resyncs[server] = seen + 1
        raise InferenceServerError(
            f"{url} answered with weight_version {reported} after it was given the policy's weights "
            f"(version {self.weight_version}) again; it does not keep the weights it is sent."
        )

    # -- what workflows call ---------------------------------------------------------------------
    def for_episode(self, seed: int) -> RolloutEngine:
        """The episode's view: one server, one session id, request seeds drawn from ``seed``.

        The first request is seeded with ``seed`` itself, as the transformers engine seeds an
        episode's stream, so ``rllm serve`` samples a single-call episode exactly as the in-process
        engine would; later requests take seeds drawn from it.
        """
        return OpenAIEpisodeView(self, f"episode-{int(seed)}", int(seed))

    async def generate(self, prompt_ids: Sequence[int], max_tokens: int | None = None) -> Generation:
        return await self.sample_ids(prompt_ids, max_tokens, f"call-{uuid.uuid4().hex}", self.rng.getrandbits(31))

    async def _get_model_response(self, messages: list[dict[str, Any]], **kwargs: Any) -> ModelOutput:
        return await self.respond(messages, f"call-{uuid.uuid4().hex}", self.rng.getrandbits(31), **kwargs)

    async def get_token_output_from_token_input(self, token_input: Sequence[int], **kwargs: Any) -> Generation:
        return await self.token_output(token_input, f"call-{uuid.uuid4().hex}", self.rng.getrandbits(31), **kwargs)

    def assemble_model_output(self, token_input: Sequence[int], token_output: Generation) -> ModelOutput:
        return self.model_output(token_output)

    @property
    def supports_token_in_token_out(self) -> bool:
        return True

    # -- the requests ----------------------------------------------------------------------------
    def _sampling(self, seed: int, overrides: dict[str, Any]) -> dict[str, Any]:
        seeded = {"seed": seed} if self.seed_requests else {}
        params = {**self.sampling_params, **seeded, **overrides}
        if self.is_validation and self.greedy_validation:
            params["temperature"] = 0.0
        return params

    def _limit(self, prompt_length: int, max_tokens: int | None) -> int:
        """The tokens to ask for: the caller's, within the response limit and what the context leaves (0: none)."""
        limit = self.max_response_length if max_tokens is None else min(int(max_tokens), self.max_response_length)
        if self.max_model_length is not None:
            limit = min(limit, int(self.max_model_length) - prompt_length)
        return max(limit, 0)

    async def sample_ids(
        self, prompt_ids: Sequence[int], max_tokens: int | None, session: str, stream_seed: int, **options: Any
    ) -> Generation:
        """Token ids in, token ids and log-probs out, through ``/v1/completions`` (``options``: a caller's sampling
        settings, its ``seed`` over the episode's ``stream_seed``)."""
        prompt = [int(token) for token in prompt_ids]
        if not prompt:
            raise DataError("engine.generate() got an empty prompt; give at least one token id.")
        limit = self._limit(len(prompt), max_tokens)
        if len(prompt) > self.max_prompt_length or limit < 1:
            return Generation([], [], "", PROMPT_TOO_LONG, prompt, self.weight_version)
        server = self.server_for(session)
        if not self._connected:  # the context limit and the model name come from the servers
            await asyncio.to_thread(self.connect)
            limit = self._limit(len(prompt), max_tokens)
            if limit < 1:
                return Generation([], [], "", PROMPT_TOO_LONG, prompt, self.weight_version)
        body = {
            "model": self.model,
            "prompt": prompt,
            "max_tokens": limit,
            "logprobs": 0,
            "return_token_ids": True,
            "user": session,
            **self._sampling(stream_seed, options),
        }
        url = f"{server}/completions"
        answer = await self._call(server, url, body, session)
        choice = answers.first_choice(answer, url)
        ids = self._token_ids(choice.get("token_ids"), url, "choices[0].token_ids")
        logprobs = (choice.get("logprobs") or {}).get("token_logprobs")
        if logprobs is None:
            raise InferenceServerError(
                f"{url} answered without choices[0].logprobs.token_logprobs; it must return the sampled tokens' "
                "log-probs when asked with logprobs=0 (vLLM and rllm serve do)."
            )
        echoed = choice.get("prompt_token_ids")
        if echoed is not None and list(echoed) != prompt:
            raise InferenceServerError(
                f"{url} sampled from other prompt ids than it was sent ({len(echoed)} ids for {len(prompt)}); it "
                "re-tokenised the prompt: serve the trained model's tokenizer."
            )
        logprobs = answers.log_probs(logprobs, url, "choices[0].logprobs.token_logprobs")
        return self._generation(answer, choice, url, prompt, ids, logprobs, limit)

    async def respond(
        self,
        messages: list[dict[str, Any]],
        session: str,
        stream_seed: int,
        conversation: ConversationPrompts | None = None,
        **kwargs: Any,
    ) -> ModelOutput:
        """rLLM's chat call: rendered here and sent as ids (extending ``conversation``'s turns), or sent as messages.

        A caller's ``seed`` (a workflow's own) is sent instead of the episode's ``stream_seed``."""
        _check_options(kwargs, CHAT_OPTIONS, "get_model_response")
        options = {k: v for k, v in kwargs.items() if k not in ("max_tokens", "application_id")}
        if self.endpoint == "completions" and getattr(self.tokenizer, "chat_template", None) is not None:
            ids = template_ids(self.tokenizer, messages) if conversation is None else conversation.prompt_ids(messages)
            generation = await self.sample_ids(ids, kwargs.get("max_tokens"), session, stream_seed, **options)
            if conversation is not None and generation.finish_reason != PROMPT_TOO_LONG:
                conversation.sampled(generation.prompt_ids, generation.response_ids)
            return self.model_output(generation)
        return await self._chat(messages, kwargs.get("max_tokens"), session, stream_seed, options)

    async def _chat(
        self, messages: list[dict[str, Any]], max_tokens: int | None, session: str, seed: int, options: dict[str, Any]
    ) -> ModelOutput:
        server = self.server_for(session)
        if not self._connected:
            await asyncio.to_thread(self.connect)
        limit = self.max_response_length if max_tokens is None else min(int(max_tokens), self.max_response_length)
        body = {
            "model": self.model,
            "messages": messages,
            "max_tokens": limit,
            "logprobs": True,
            "return_token_ids": True,
            "user": session,
            **self._sampling(seed, options),
        }
        url = f"{server}/chat/completions"
        answer = await self._call(server, url, body, session)
        choice = answers.first_choice(answer, url)
        ids = self._token_ids(choice.get("token_ids"), url, "choices[0].token_ids")
        prompt = self._token_ids(answer.body.get("prompt_token_ids"), url, "prompt_token_ids")
        content = (choice.get("logprobs") or {}).get("content")
        if content is None:
            raise InferenceServerError(
                f"{url} answered without choices[0].logprobs.content; it must return the sampled tokens' log-probs "
                "when asked with logprobs=true."
            )
        values = [item.get("logprob") if isinstance(item, dict) else None for item in content]
        logprobs = answers.log_probs(values, url, "choices[0].logprobs.content", ".logprob")
        generation = self._generation(answer, choice, url, list(prompt), ids, logprobs, limit)
        text = (choice.get("message") or {}).get("content") or ""
        return completion_output(
            text,
            prompt_ids=generation.prompt_ids,
            completion_ids=generation.response_ids,
            logprobs=generation.logprobs,
            finish_reason=generation.finish_reason,
        )

    async def token_output(
        self, token_input: Sequence[int], session: str, stream_seed: int, **kwargs: Any
    ) -> Generation:
        """Token ids in and out; a caller's ``seed`` (a workflow's own) wins over the episode's stream."""
        _check_options(kwargs, TOKEN_OPTIONS, "get_token_output_from_token_input")
        options = {"seed": kwargs["seed"]} if "seed" in kwargs else {}
        return await self.sample_ids(token_input, kwargs.get("max_tokens"), session, stream_seed, **options)

    def _generation(
        self,
        answer: Answer,
        choice: dict[str, Any],
        url: str,
        prompt: list[int],
        ids: list[int],
        logprobs: list[float],
        limit: int,
    ) -> Generation:
        """The checked answer (log-probs checked where read): one per id, no more ids than asked for, the version."""
        answers.check_sampled(ids, logprobs, limit, url)
        text = choice.get("text")
        if text is None:
            text = (choice.get("message") or {}).get("content") or ""
        reason = str(choice.get("finish_reason") or "stop")
        version = answer.body.get("weight_version")
        sampled_by = self.weight_version if version is None else answers.integer(version, url, "weight_version", 0)
        return Generation(ids, logprobs, text, reason, prompt, sampled_by)

    def _token_ids(self, ids: Any, url: str, field: str) -> list[int]:
        """The answer's ``field``: token ids within the trainer's vocabulary (when the engine has its tokenizer)."""
        return answers.token_ids(ids, url, field, None if self.tokenizer is None else len(self.tokenizer))

    def model_output(self, generation: Generation) -> ModelOutput:
        """The :class:`ModelOutput` of one generation; a prompt that was too long ends the episode."""
        return generation_output(generation)


def _check_options(kwargs: dict[str, Any], allowed: tuple[str, ...], door: str) -> None:
    """Refuse a keyword ``door`` does not take, and a ``seed`` a server would not (OpenAI's and vLLM's: [0, 2**63))."""
    unknown = sorted(set(kwargs) - set(allowed))
    if unknown:
        raise EngineCallError(
            f"{door} got {', '.join(map(repr, unknown))}, which OpenAIEngine does not take; it takes "
            f"{', '.join(allowed)}."
        )
    seed = kwargs.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63):
        raise EngineCallError(f"{door} got seed={seed!r}; give an int in [0, 2**63).")
