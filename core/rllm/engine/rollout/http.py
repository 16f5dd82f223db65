"""JSON over HTTP with the standard library: what the OpenAI engine and the weight syncs send to servers.

Each thread keeps one persistent connection per server (``http.client``), so a rollout's
requests pay no TCP handshake after the first; a connection the server closed while idle is
reopened once. Failures are one :class:`~rllm.errors.InferenceServerError` naming the URL:
no answer (:class:`ServerUnreachable`, worth retrying), no answer in time
(:class:`ServerTimeout`), or an answer that is not JSON. An HTTP error status is returned, not
raised, so callers decide what a 4xx or 5xx means.

Hand-written on ``http.client`` rather than httpx or requests: the core's dependencies are pluggy,
numpy, omegaconf and importlib-metadata, and a few JSON POSTs on kept-alive connections are all it sends.
"""

from __future__ import annotations

import http.client
import json
import threading
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from rllm.errors import InferenceServerError

__all__ = ["Answer", "ServerTimeout", "ServerUnreachable", "request_json"]


class ServerUnreachable(InferenceServerError):
    """No connection, or the connection dropped before an answer: the server is down or restarting."""


class ServerTimeout(InferenceServerError):
    """The server took longer than the request's timeout to answer."""


@dataclass(frozen=True)
class Answer:
    """One HTTP answer: its status and its JSON body (a dict; ``{}`` for an empty body)."""

    status: int
    body: dict[str, Any]

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def error_message(self) -> str:
        """The server's own words for a refusal (OpenAI's ``error.message``, FastAPI's ``detail``), on one line."""
        error = self.body.get("error")
        if isinstance(error, dict) and error.get("message"):
            text = str(error["message"])
        elif isinstance(error, str):
            text = error
        elif "detail" in self.body:
            text = str(self.body["detail"])
        elif "message" in self.body:
            text = str(self.body["message"])
        else:
            text = json.dumps(self.body)[:200]
        return " ".join(text.split())


class _Connections(threading.local):
    def __init__(self) -> None:
        self.by_server: dict[tuple[str, str], http.client.HTTPConnection] = {}


_connections = _Connections()


def _connection(scheme: str, netloc: str, timeout: float) -> tuple[http.client.HTTPConnection, bool]:
    """This thread's connection to the server, and whether it was open already (then it may have gone stale)."""
    key = (scheme, netloc)
    connection = _connections.by_server.get(key)
    if connection is not None:
        connection.timeout = timeout
        if connection.sock is not None:
            connection.sock.settimeout(timeout)
        return connection, True
    kind = http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection
    connection = kind(netloc, timeout=timeout)
    _connections.by_server[key] = connection
    return connection, False


def _drop(scheme: str, netloc: str) -> None:
    connection = _connections.by_server.pop((scheme, netloc), None)
    if connection is not None:
        connection.close()


def request_json(
    url: str,
    body: dict[str, Any] | bytes | None = None,
    *,
    timeout: float,
    method: str | None = None,
    headers: dict[str, str] | None = None,
) -> Answer:
    """Send ``body`` (JSON, raw bytes, or nothing: a GET) to ``url`` and read the JSON answer."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise InferenceServerError(f"{url!r} is not an http:// or https:// URL.")
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    sent_headers = dict(headers or {})
    if isinstance(body, dict):
        data: bytes | None = json.dumps(body).encode()
        sent_headers.setdefault("Content-Type", "application/json")
    else:
        data = body
        if data is not None:
            sent_headers.setdefault("Content-Type", "application/octet-stream")
    verb = method or ("GET" if data is None else "POST")
    for attempt in (0, 1):
        connection, reused = _connection(parts.scheme, parts.netloc, timeout)
        try:
            connection.request(verb, path, body=data, headers=sent_headers)
            response = connection.getresponse()
            raw = response.read()
            break
        except TimeoutError:
            _drop(parts.scheme, parts.netloc)
            raise ServerTimeout(f"{url}: no answer within {timeout:g} s") from None
        except (OSError, http.client.HTTPException) as exc:
            _drop(parts.scheme, parts.netloc)
            if reused and attempt == 0:  # the server closed an idle connection: open a fresh one, once
                continue
            reason = getattr(exc, "strerror", None) or type(exc).__name__
            raise ServerUnreachable(f"{url}: no answer ({reason})") from None
    if response.getheader("Connection", "").lower() == "close":
        _drop(parts.scheme, parts.netloc)
    if not raw.strip():
        return Answer(response.status, {})
    try:
        parsed = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        first = raw[:120].decode(errors="replace").splitlines()[0] if raw else ""
        raise InferenceServerError(
            f"{url}: answered HTTP {response.status} with a body that is not JSON ({first!r})"
        ) from None
    if not isinstance(parsed, dict):
        parsed = {"data": parsed}
    return Answer(response.status, parsed)
