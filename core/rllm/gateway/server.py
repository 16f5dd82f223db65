"""The trainer's gateway: an OpenAI-compatible HTTP endpoint on which agents sample the policy, every call recorded.

Each episode opens a :class:`Session`; its base URL (``http://HOST:PORT/sessions/ID/v1``) is
what the agent gives ``openai.OpenAI(base_url=...)``. A call through it is answered by the
episode's rollout engine (its own random stream, batched with the other episodes' calls on the
trainer's event loop): chat messages through ``get_model_response``, a completion prompt through
the token-in/token-out pair. The answer's exact ids and log-probs become a :class:`~rllm.types.Step`
of the session, so the trainer learns from what was sampled, never from re-tokenised text.

The HTTP layer is the standard library's threading server, on threads of its own, never on the
trainer's event loop: each request's thread hands the model call to the event loop the session
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
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
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
from rllm.types import Step, TerminationEvent, TerminationReason

__all__ = ["DEFAULT_MODEL", "Gateway", "Session"]

NAME = "the rllm gateway"
DEFAULT_MODEL = "policy"
"""The model name flows are given (``AgentConfig.model``) and requests must carry."""
SAMPLING_KEYS = ("temperature", "top_p", "top_k", "seed")
"""Request fields handed to the engine as they are: it samples with them or refuses them (naming them)."""
BLOCKED_AFTER = 2.0
"""Seconds a call may wait for the loop while its own flow holds the loop, before the gateway calls it a deadlock."""
MAX_BODY = 64 * 2**20
"""The largest request body read (bytes); a larger one is a 413."""
BLOCKED = (
    "the agent flow's async arun blocks the trainer's event loop while it waits for this call, which only that loop "
    "can answer (a synchronous client such as openai.OpenAI inside async def arun); use openai.AsyncOpenAI in arun, "
    "or define a synchronous run(task, config) instead"
)


@dataclass
class Session:
    """One episode's calls: the engine that answers them, the loop they run on, and the steps recorded."""

    id: str
    engine: RolloutEngine
    loop: asyncio.AbstractEventLoop
    base_url: str
    steps: list[Step] = field(default_factory=list)
    termination: TerminationReason | None = None
    """Set when a call ended the episode (a prompt over the engine's limit): the episode ends with it."""
    errors: list[str] = field(default_factory=list)
    """Why calls were refused or failed, for the episode's error when the flow then fails."""
    running_since: float | None = None
    """``time.monotonic()`` when the episode's ``arun`` last resumed on the loop, None while it awaits (set by
    :func:`rllm.workflows.agent_flow.run_agent_flow`): how the gateway tells a deadlock from a busy loop."""
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def recorded(self) -> list[Step]:
        with self._lock:
            return list(self.steps)

    def record(self, step: Step) -> None:
        with self._lock:
            self.steps.append(step)


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
        self._server: _Server | None = None
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
            server = _Server((self.host, self.port), _handler(self))
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


class _Server(ThreadingHTTPServer):
    """The threading server, quiet about a connection that breaks: a client that hangs up or sends garbage must not
    print a traceback into the trainer's output (its request is answered 400 where it can be read at all)."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Drop the connection without a word (the default prints the traceback to stderr)."""


def _handler(gateway: Gateway) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: one line per request would flood a training run's output."""

        def do_GET(self) -> None:
            self._serve("GET", None)

        def do_POST(self) -> None:
            given = self.headers.get("Content-Length") or "0"
            length = int(given) if given.strip().isdigit() else -1
            if length < 0 or length > MAX_BODY:
                self.close_connection = True  # the body's end is unknown: nothing more is read on this connection
                status, why = (413, f"over {MAX_BODY} bytes") if length > MAX_BODY else (400, "not a byte count")
                self._send(status, RequestError(f"Content-Length {given[:40]!r} is {why}.").body())
                return
            raw = self.rfile.read(length) if length else b""
            if len(raw) < length:  # the client went away mid-body
                self.close_connection = True
                return
            try:
                body = json.loads(raw) if raw else None
            except (ValueError, RecursionError) as exc:  # not JSON, not UTF-8, or nested past the parser's depth
                reason = "nested too deep" if isinstance(exc, RecursionError) else str(exc)
                self._send(400, RequestError(f"the request body is not valid JSON ({reason}).").body())
                return
            if not isinstance(body, dict):
                self._send(400, RequestError("the request body must be a JSON object.").body())
                return
            self._serve("POST", body)

        def _serve(self, method: str, body: dict[str, Any] | None) -> None:
            try:
                answer = gateway.answer(method, self.path, body)
            except RequestError as exc:
                self._send(exc.status, exc.body())
                return
            except Exception as exc:  # an engine failure: a 500 for this call, the gateway carries on
                self._send(500, RequestError(f"{type(exc).__name__}: {exc}", None, 500).body())
                return
            self._send(200, answer)

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler
