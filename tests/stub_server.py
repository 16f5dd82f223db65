"""A stub HTTP server in a thread: records each request and answers what the test tells it to."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Reply = tuple[int, dict[str, Any]]
"""A status and a JSON body."""


class Stub(ThreadingHTTPServer):
    """``reply(path, body)`` decides each answer (default: 200 and ``{}``); ``delay`` seconds pass before it."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.seen: list[tuple[str, Any]] = []
        self.reply: Callable[[str, Any], Reply] = lambda path, body: (200, {})
        self.delay = 0.0

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: Stub
    protocol_version = "HTTP/1.1"

    def _answer(self, body: Any) -> None:
        self.server.seen.append((self.path, body))
        status, answer = self.server.reply(self.path, body)
        time.sleep(self.server.delay)
        raw = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_GET(self) -> None:
        self._answer(None)

    def do_POST(self) -> None:
        data = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        json_body = self.headers.get("Content-Type") == "application/json"
        self._answer(json.loads(data) if json_body else data)

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def stub_server() -> Iterator[Stub]:
    server = Stub()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
