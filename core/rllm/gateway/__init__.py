"""The trainer's gateway: each episode's OpenAI-compatible URL, every call through it recorded as a step."""

from __future__ import annotations

from rllm.gateway.server import DEFAULT_MODEL, Gateway, Session

__all__ = ["DEFAULT_MODEL", "Gateway", "Session"]
