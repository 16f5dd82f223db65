"""The one check of the chat messages a workflow hands a rollout engine, shared by every engine."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rllm.errors import EngineCallError

__all__ = ["MESSAGE_ROLES", "check_messages"]

MESSAGE_ROLES = ("system", "user", "assistant", "tool")


def check_messages(messages: object) -> list[Mapping[str, Any]]:
    """``messages`` as a list of role/content dicts, or an :class:`~rllm.errors.EngineCallError` naming the field."""
    if isinstance(messages, str | bytes) or not isinstance(messages, Sequence):
        raise EngineCallError(
            f"messages is a {type(messages).__name__}; pass a list of dicts such as "
            '[{"role": "user", "content": "..."}].'
        )
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise EngineCallError(f"messages[{i}] is a {type(message).__name__}; each message is a dict with 'role'.")
        role = message.get("role")
        if role not in MESSAGE_ROLES:
            raise EngineCallError(f"messages[{i}]['role'] is {role!r}; use one of {', '.join(MESSAGE_ROLES)}.")
        content = message.get("content")
        if not (isinstance(content, str) or (content is None and role == "assistant")):
            raise EngineCallError(
                f"messages[{i}]['content'] ({role}) is {type(content).__name__}; give a string "
                "(only an assistant message that calls tools may have content None)."
            )
    return list(messages)
