"""The gateway's HTTP layer: the standard library's threading server, and a handler that speaks JSON.

Each request is read on a thread of its own (a body of at most ``MAX_BODY`` bytes, a JSON
object), handed to :meth:`rllm.gateway.server.Gateway.answer`, and its answer or
:class:`~rllm.engine.openai_api.RequestError` written back as JSON. A connection that breaks, or a
request that cannot be read, is dropped or answered 400, never with a traceback in the trainer's output.
"""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from rllm.engine.openai_api import RequestError

if TYPE_CHECKING:
    from rllm.gateway.server import Gateway

__all__ = ["MAX_BODY", "QuietServer", "handler"]

MAX_BODY = 64 * 2**20
"""The largest request body read (bytes); a larger one is a 413."""


class QuietServer(ThreadingHTTPServer):
    """The threading server, quiet about a connection that breaks: a client that hangs up or sends garbage must not
    print a traceback into the trainer's output (its request is answered 400 where it can be read at all)."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Drop the connection without a word (the default prints the traceback to stderr)."""


def handler(gateway: Gateway) -> type[BaseHTTPRequestHandler]:
    """The request handler class of ``gateway``'s server: JSON in, :meth:`Gateway.answer`, JSON out."""

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
