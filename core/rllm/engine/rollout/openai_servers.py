"""The servers an :class:`~rllm.engine.rollout.openai_engine.OpenAIEngine` samples from: reaching them, checking them.

A request that gets no answer, a timeout, a 5xx or a 429 is retried ``api_retries`` times with
doubling back-off (a loop of its own, not tenacity: that is no dependency of the core, and the
loop also notes whether an attempt went unanswered, which the engine's ``resync`` needs), then
fails with one line naming the URL. On :meth:`OpenAIServers.connect` the engine asks each server
for its model and context, and, when it has the trainer's tokenizer, compares the server's
vocabulary and end-of-sequence token with it (vLLM's ``/tokenize`` and ``/detokenize``), refusing
a server whose tokenizer differs.
"""

from __future__ import annotations

import threading
import time
import uuid
import warnings
import zlib
from typing import Any

from rllm.engine.rollout import answers
from rllm.engine.rollout.http import Answer, ServerTimeout, ServerUnreachable, request_json
from rllm.errors import InferenceServerError, RLLMWarning

__all__ = ["RETRIED_STATUSES", "OpenAIServers"]

RETRIED_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
"""Answers worth another attempt: the server is overloaded, restarting or timed out itself."""


class OpenAIServers:
    """What :class:`~rllm.engine.rollout.openai_engine.OpenAIEngine` does with its servers, besides sampling.

    A base class of the engine, reading the settings its constructor sets (``base_urls``,
    ``model``, ``tokenizer``, ``api_key``, ``api_retries``, ``retry_backoff``, ``timeout``,
    ``max_model_length``) and the ``_connecting`` lock and ``_connected`` flag.
    """

    base_urls: list[str]
    model: str | None
    tokenizer: Any
    api_key: str
    api_retries: int
    retry_backoff: float
    timeout: float
    max_model_length: int | None
    _connected: bool
    _connecting: threading.Lock

    def server_for(self, session: str) -> str:
        """The server a session sticks to (the same one for every call of an episode)."""
        return self.base_urls[zlib.crc32(session.encode()) % len(self.base_urls)]

    def _root(self, server: str) -> str:
        return server[: -len("/v1")] if server.endswith("/v1") else server

    def _headers(self, session: str | None) -> dict[str, str]:
        headers = {"Authorization": f"Bearer {self.api_key}", "X-Request-Id": uuid.uuid4().hex}
        if session:
            headers["X-Session-Id"] = session
        return headers

    def call(self, url: str, body: dict[str, Any] | None, session: str | None = None) -> Answer:
        """One request with its retries (blocking): the answer, or one line naming the URL and what went wrong."""
        return self._attempts(url, body, session)[0]

    def _attempts(self, url: str, body: dict[str, Any] | None, session: str | None) -> tuple[Answer, bool]:
        """:meth:`call`'s answer, and whether an attempt before it got no answer (the server may have restarted)."""
        delay, attempts, unanswered = self.retry_backoff, self.api_retries + 1, False
        for attempt in range(1, attempts + 1):
            try:
                answer = request_json(url, body, timeout=self.timeout, headers=self._headers(session))
            except (ServerUnreachable, ServerTimeout) as exc:
                problem = str(exc).removeprefix(f"{url}: ")
                unanswered = unanswered or isinstance(exc, ServerUnreachable)
            else:
                if answer.ok:
                    return answer, unanswered
                problem = f"HTTP {answer.status}: {answer.error_message()}"
                if answer.status not in RETRIED_STATUSES:
                    raise InferenceServerError(f"{url} refused the request ({problem}).")
            if attempt < attempts:
                time.sleep(delay)
                delay *= 2
        raise InferenceServerError(
            f"{url}: {problem} after {attempts} attempt{'s' if attempts > 1 else ''}; start the server or fix "
            "rllm.rollout.openai.base_url."
        )

    def connect(self) -> None:
        """Ask every server for its model and context limit, and check its tokenizer against the trainer's."""
        with self._connecting:
            if self._connected:
                return
            limits = []
            for server in self.base_urls:
                cards = self.call(f"{server}/models", None).body.get("data") or []
                names = [str(card.get("id")) for card in cards if isinstance(card, dict)]
                if self.model is None:
                    if not names:
                        raise InferenceServerError(
                            f"{server}/models lists no model; set rllm.rollout.openai.model to the served name."
                        )
                    self.model = names[0]
                elif names and self.model not in names:
                    raise InferenceServerError(
                        f"{server} does not serve the model {self.model!r} (it serves {', '.join(names)}); "
                        "fix rllm.rollout.openai.model."
                    )
                card = next((c for c in cards if isinstance(c, dict) and c.get("id") == self.model), {})
                if card.get("max_model_len") is not None:  # a context must hold a prompt token and a sampled one
                    limits.append(answers.integer(card["max_model_len"], f"{server}/models", "max_model_len", 2))
                if self.tokenizer is not None:
                    self._check_tokenizer(server)
            if limits and self.max_model_length is None:
                self.max_model_length = min(limits)
            self._connected = True

    def _check_tokenizer(self, server: str) -> None:
        """Refuse a server whose vocabulary or end-of-sequence token differs from the trainer's tokenizer."""
        tokenizer = self.tokenizer
        size = len(tokenizer)
        eos = tokenizer.eos_token_id
        probe = sorted({0, size // 3, size // 2, size - 1} | ({int(eos)} if eos is not None else set()))
        url = f"{self._root(server)}/detokenize"
        try:
            answer = request_json(url, {"model": self.model, "tokens": probe}, timeout=self.timeout)
        except InferenceServerError:
            answer = Answer(404, {})
        if answer.status in (404, 405):
            warnings.warn(
                f"{server} has no /detokenize route (vLLM's), so its tokenizer could not be compared with the "
                "trainer's; make sure it serves the same model.",
                RLLMWarning,
                stacklevel=3,
            )
            return
        expected = tokenizer.decode(probe, skip_special_tokens=False)
        text = answer.body.get("prompt")
        if not answer.ok or text != expected:
            said = answer.error_message() if not answer.ok else f"decodes them as {text!r}"
            raise InferenceServerError(
                f"{server} has another tokenizer than the trainer's: token ids {probe} (the end of sequence "
                f"{eos}, the last of {size}) decode as {expected!r} here, and the server {said}; serve the trained "
                "model's tokenizer."
            )
