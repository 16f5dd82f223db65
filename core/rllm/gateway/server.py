"""The trainer's gateway: an OpenAI-compatible HTTP endpoint on which agents sample the policy, every call recorded.

Each episode opens a :class:`Session`; its base URL (``http://HOST:PORT/sessions/ID/v1``) is
what the agent gives ``openai.OpenAI(base_url=...)``. A call through it is answered by the
episode's rollout engine (its own random stream, batched with the other episodes' calls on the
trainer's event loop): chat messages through ``get_model_response``, a completion prompt through
the token-in/token-out pair. The answer's exact ids and log-probs become a :class:`~rllm.types.Step`
of the session, so the trainer learns from what was sampled, never from re-tokenised text.

The HTTP layer (``rllm.gateway.http_server``) is the standard library's threading server, on threads of its
own, never on the trainer's event loop: each request's thread hands the model call to the event loop the session
was opened on and waits for it. Requests are read and answered in :mod:`rllm.engine.openai_api`'s
dialect, as ``rllm serve`` does. It stays hand-made rather than uvicorn (``rllm serve``'s stack)
because agent flows are core, and core installs no HTTP server. A malformed request is answered
400 or its connection dropped, never with a traceback in the trainer's output.

The model call needs the trainer's loop. An ``async def arun`` that calls the gateway with a
synchronous client (``openai.OpenAI``) blocks that loop while it waits for the answer, which only
the loop can give: when the call has not started after ``BLOCKED_AFTER`` seconds while the
session's flow is still running without awaiting (``Session.running_since``), the call is
refused with a 400 that says so, and the flow fails with that cause instead of hanging the run.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
import warnings
from collections.abc import Callable
from concurrent import futures
from typing import Any

from rllm.engine import ModelOutput, RolloutEngine
from rllm.engine.openai_api import (
    Choice,
    RequestError,
    answer_body,
    check_fields,
    logprobs_of,
    max_tokens_of,
    number,
)
from rllm.errors import ConfigError, RLLMError, RLLMWarning
from rllm.gateway.http_server import MAX_BODY, QuietServer, handler
from rllm.gateway.session import Session
from rllm.types import Step, TerminationEvent

__all__ = ["BLOCKED", "DEFAULT_MODEL", "MAX_BODY", "Gateway", "Session"]

NAME = "the rllm gateway"
DEFAULT_MODEL = "policy"
"""The model name flows are given (``AgentConfig.model``) and requests must carry."""
SAMPLING_KEYS = ("temperature", "top_p", "top_k", "seed")
"""Request fields handed to the engine as they are: it samples with them or refuses them (naming them)."""
BLOCKED_AFTER = 2.0
"""Seconds a call may wait for the loop while its own flow holds the loop, before the gateway calls it a deadlock."""
BLOCKED = (
    "the agent flow's async arun blocks the trainer's event loop while it waits for this call, which only that loop "
    "can answer (a synchronous client such as openai.OpenAI inside async def arun); use openai.AsyncOpenAI in arun, "
    "or define a synchronous run(task, config) instead"
)


class Gateway:
    """The HTTP endpoint and its open sessions; :meth:`start` listens, :meth:`stop` closes it."""

    def __init__(
        self, host: str = "127.0.0.1", port: int = 0, model: str = DEFAULT_MODEL, stall_after: float | None = None
    ) -> None:
        self.host, self.port, self.model = host, int(port), model
        self.stall_after = stall_after
        """Seconds an ``arun`` may hold the event loop without awaiting before a warning says so (None: never)."""
        self._stopped = threading.Event()
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()
        self._server: QuietServer | None = None
        self._deadlocks = 0
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The root URL (``/health`` lives there)."""
        return f"http://{self.host}:{self.port}"

    def start(self) -> Gateway:
        """Listen (port 0: a free one, then ``port`` is it) and serve on a daemon thread."""
        if self._server is not None:
            return self
        try:
            server = QuietServer((self.host, self.port), handler(self))
        except OSError as exc:
            raise ConfigError(
                f"rllm.gateway could not listen on {self.host}:{self.port} ({exc.strerror or exc}); set "
                "rllm.gateway.port to a free port, or 0 for any."
            ) from None
        self._server, self.port = server, int(server.server_address[1])
        self._thread = threading.Thread(target=server.serve_forever, name="rllm-gateway", daemon=True)
        self._thread.start()
        self._stopped.clear()
        if self.stall_after is not None:
            watch = threading.Thread(
                target=self._watch, args=(self.stall_after,), name="rllm-gateway-watch", daemon=True
            )
            watch.start()
        return self

    def _watch(self, stall_after: float) -> None:
        """Say once when an ``arun`` has held the event loop past ``stall_after`` seconds. Nothing can end it (the
        deadline that would is on the loop it holds), but the run no longer hangs without a word."""
        while not self._stopped.wait(1.0):
            with self._lock:
                since = [s.running_since for s in self._sessions.values() if s.running_since is not None]
            held = max((time.monotonic() - start for start in since), default=0.0)
            if held > stall_after:
                warnings.warn(
                    f"an agent flow's async arun has held the trainer's event loop for {held:.0f} s without awaiting "
                    "(a blocking call such as time.sleep or requests inside async def arun): no episode moves and "
                    "rllm.workflow.timeout cannot end it; await such calls through asyncio.to_thread, or define a "
                    "synchronous run(task, config) instead.",
                    RLLMWarning,
                    stacklevel=1,
                )
                return

    def stop(self) -> None:
        """Stop listening; open sessions' calls are refused from now on."""
        self._stopped.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        with self._lock:
            self._sessions.clear()

    def open(self, engine: RolloutEngine, loop: asyncio.AbstractEventLoop) -> Session:
        """A new session answered by ``engine`` on ``loop`` (the loop the episode runs on)."""
        if self._server is None:
            raise ConfigError("The gateway is not listening; call Gateway.start() before opening sessions.")
        sid = uuid.uuid4().hex
        session = Session(sid, engine, loop, f"{self.url}/sessions/{sid}/v1")
        with self._lock:
            self._sessions[sid] = session
        return session

    def close(self, session: Session) -> list[Step]:
        """End the session (later calls get 404) and give its steps in the order they were answered."""
        with self._lock:
            self._sessions.pop(session.id, None)
        return session.recorded()

    def session(self, sid: str) -> Session:
        with self._lock:
            found = self._sessions.get(sid)
        if found is None:
            raise RequestError(
                f"no open session {sid!r}: its episode has ended (sessions last one episode).", None, 404, "not_found"
            )
        return found

    # -- the routes ---------------------------------------------------------------------------------
    def answer(self, method: str, path: str, body: dict[str, Any] | None) -> dict[str, Any]:
        """The JSON answer to one request, or a :class:`RequestError`."""
        parts = path.split("?", 1)[0].strip("/").split("/")
        if method == "GET" and parts == ["health"]:
            with self._lock:
                return {"status": "ok", "sessions": len(self._sessions)}
        if len(parts) < 3 or parts[0] != "sessions" or parts[2] != "v1":
            raise RequestError(f"no route {path}; use /sessions/SESSION/v1/...", None, 404, "not_found")
        session, route = self.session(parts[1]), "/".join(parts[3:])
        if method == "GET" and route == "models":
            return {"object": "list", "data": [{"id": self.model, "object": "model", "created": 0, "owned_by": "rllm"}]}
        if method == "POST" and route in ("chat/completions", "completions"):
            body = body or {}
            check_fields(body, NAME)
            if body.get("model") != self.model:
                raise RequestError(
                    f"The model {body.get('model')!r} does not exist; the gateway serves {self.model!r} "
                    "(AgentConfig.model).",
                    "model",
                    404,
                    "model_not_found",
                )
            return self._chat(session, body) if route == "chat/completions" else self._completion(session, body)
        raise RequestError(f"no route {method} {path}", None, 404, "not_found")

    def _options(self, body: dict[str, Any], chat: bool) -> dict[str, Any]:
        """What the engine is asked besides the prompt: the token limit and the sampling fields given."""
        if number(body, "n", int, 1, 1) != 1:
            raise RequestError("the gateway answers one choice per request; send n=1 and call again for more.", "n")
        if body.get("stop"):
            raise RequestError(
                "the gateway does not cut at stop strings (the policy's end-of-turn token ends a reply); leave "
                "stop out and cut the text yourself.",
                "stop",
            )
        options = {key: body[key] for key in SAMPLING_KEYS if body.get(key) is not None}
        _, max_tokens = max_tokens_of(body, chat, None)
        if max_tokens is not None:
            options["max_tokens"] = max_tokens
        return options

    def _chat(self, session: Session, body: dict[str, Any]) -> dict[str, Any]:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            raise RequestError("messages must be a non-empty list of {role, content} objects.", "messages")
        logprobs, options = logprobs_of(body, True, NAME), self._options(body, True)
        output = self._call(session, lambda: session.engine.get_model_response(messages, **options))
        step = Step.from_model_output(output, messages=[dict(m) for m in messages])
        session.record(step)
        text = output.content if output.content is not None else output.text or ""
        answer = answer_body(
            True,
            self.model,
            list(output.prompt_ids or []),
            [_choice(output, text)],
            self._decoder(session),
            logprobs,
            bool(body.get("return_token_ids", False)),
            output.weight_version,
        )
        if output.tool_calls:
            answer["choices"][0]["message"]["tool_calls"] = [
                _tool_call(i, call) for i, call in enumerate(output.tool_calls)
            ]
        return answer

    def _completion(self, session: Session, body: dict[str, Any]) -> dict[str, Any]:
        engine = session.engine
        if not engine.supports_token_in_token_out:
            raise RequestError(
                f"{type(engine).__qualname__} does not sample from token ids, so /v1/completions is not served; "
                "use /v1/chat/completions.",
                "prompt",
            )
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]  # a batch of one
        if isinstance(prompt, str) and prompt:
            if engine.tokenizer is None:
                raise RequestError("the engine has no tokenizer; send the prompt as a list of token ids.", "prompt")
            ids = [int(t) for t in engine.tokenizer.encode(prompt, add_special_tokens=False)]
        elif isinstance(prompt, list) and prompt and all(type(t) is int for t in prompt):
            ids = list(prompt)
        else:
            raise RequestError("prompt must be a non-empty string or list of token ids (one per request).", "prompt")
        logprobs, options = logprobs_of(body, False, NAME), self._options(body, False)
        options.setdefault("max_tokens", number(body, "max_tokens", int, 16, 1))

        async def sample() -> ModelOutput:
            version = engine.weight_version  # read before sampling, as get_model_response does
            token_output = await engine.get_token_output_from_token_input(ids, **options)
            output = engine.assemble_model_output(ids, token_output)
            output.weight_version = version
            return output

        output = self._call(session, sample)
        text = output.text or ""
        step = Step(observation=prompt, model_response=text, model_output=output)
        session.record(step)
        return answer_body(
            False,
            self.model,
            ids,
            [_choice(output, text)],
            self._decoder(session),
            logprobs,
            bool(body.get("return_token_ids", False)),
            output.weight_version,
        )

    def _call(self, session: Session, make: Callable[[], Any]) -> ModelOutput:
        """Run the engine call on the session's loop and wait for it; what the engine refuses is a 400."""

        started = threading.Event()

        async def run() -> Any:
            started.set()
            return await make()

        try:
            output = self._wait(session, asyncio.run_coroutine_threadsafe(run(), session.loop), started)
        except RequestError:  # the call was refused before the engine saw it
            raise
        except TerminationEvent as event:
            session.termination = event.reason
            raise RequestError(
                f"the episode ended: {event.reason.value} (the prompt is longer than the engine takes).",
                "messages",
                code="context_length_exceeded",
            ) from None
        except (RLLMError, NotImplementedError) as exc:  # the engine refused the request
            session.errors.append(str(exc))
            raise RequestError(str(exc)) from None
        except Exception as exc:  # the engine failed: a 500 for this call, the gateway carries on
            session.errors.append(f"{type(exc).__name__}: {exc}")
            raise RequestError(f"the engine failed: {type(exc).__name__}: {exc}", None, 500) from None
        if not isinstance(output, ModelOutput) or output.completion_ids is None or output.logprobs is None:
            raise RequestError(
                f"{type(session.engine).__qualname__} answered without completion ids or log-probs; the gateway "
                "records only what was sampled, so the engine must return both.",
                None,
                500,
            )
        return output

    def _wait(self, session: Session, future: futures.Future[Any], started: threading.Event) -> Any:
        """The call's result; refused when the session's own flow blocks the loop that must start it (a deadlock).

        Once one such deadlock was seen the flow is known to do it, so later calls are refused at once: each episode
        of the run would otherwise hold the loop for ``BLOCKED_AFTER`` seconds in turn.
        """
        while not started.wait(0.05 if self._deadlocks else 0.25):
            since = session.running_since
            if since is not None and time.monotonic() - since >= (0.0 if self._deadlocks else BLOCKED_AFTER):
                future.cancel()
                self._deadlocks += 1
                session.errors.append(BLOCKED)
                raise RequestError(BLOCKED + ".", None, 400, "event_loop_blocked")
        return future.result()

    @staticmethod
    def _decoder(session: Session) -> Callable[[list[int]], str]:
        tokenizer = session.engine.tokenizer
        if tokenizer is None:
            return lambda ids: ""
        return lambda ids: str(tokenizer.decode(ids))


def _tool_call(index: int, call: Any) -> dict[str, Any]:
    """A :class:`~rllm.engine.ToolCall` as an OpenAI message's ``tool_calls`` item (arguments as JSON text)."""
    function = {"name": call.name, "arguments": json.dumps(call.arguments)}
    return {"id": f"call_{index}", "type": "function", "function": function}


def _choice(output: ModelOutput, text: str) -> Choice:
    return Choice(text, list(output.completion_ids or []), list(output.logprobs or []), output.finish_reason)
