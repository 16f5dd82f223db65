"""Tool calls in model text: the Qwen/Hermes ``<tool_call>{json}</tool_call>`` format, read and written.

A model trained on Qwen's (or NousResearch Hermes') chat template asks for a tool by writing a
JSON object ``{"name": ..., "arguments": {...}}`` between ``<tool_call>`` tags. Reading the
blocks back is the engine's job (they become ``ModelOutput.tool_calls``); a block that is not
such an object stays in the text, so nothing the model wrote is lost, and is counted, so a
run can see how often its model writes broken calls.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rllm.errors import DataError

__all__ = ["TOOL_CALL_BEGIN", "TOOL_CALL_END", "ParsedToolCalls", "ToolCall", "format_tool_call", "parse_tool_calls"]

TOOL_CALL_BEGIN = "<tool_call>"
TOOL_CALL_END = "</tool_call>"
_BLOCK = re.compile(re.escape(TOOL_CALL_BEGIN) + r"(.*?)" + re.escape(TOOL_CALL_END), re.DOTALL)


@dataclass
class ToolCall:
    """One call of a tool the model asked for: the tool's name and its arguments (rLLM's ``ToolCall``)."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": self.arguments}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "tool call") -> ToolCall:
        """The call of :meth:`to_dict`, or of an OpenAI message's ``{"function": {"name", "arguments"}}``."""
        call = _as_call(data)
        if call is None:
            raise DataError(
                f"{where} is {data!r}; give a dict with a string 'name' and an 'arguments' object "
                '(e.g. {"name": "search", "arguments": {"query": "..."}}).'
            )
        return call


def _as_call(data: Any) -> ToolCall | None:
    """``data`` as a call when it is one (``arguments`` may be a JSON string of an object, or absent), else None."""
    if isinstance(data, Mapping) and isinstance(data.get("function"), Mapping):
        data = data["function"]
    if not isinstance(data, Mapping) or not isinstance(data.get("name"), str) or not data["name"]:
        return None
    arguments = data.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return None
    if not isinstance(arguments, Mapping):
        return None
    return ToolCall(name=data["name"], arguments=dict(arguments))


@dataclass
class ParsedToolCalls:
    """What :func:`parse_tool_calls` read: the calls, the text left around them, and how many blocks were broken."""

    text: str
    tool_calls: list[ToolCall]
    invalid: int = 0
    """Blocks that are not a JSON call object, or a ``<tool_call>`` never closed; they stay in ``text``."""


def parse_tool_calls(text: str) -> ParsedToolCalls:
    """Read the ``<tool_call>`` blocks of ``text``: each JSON call becomes a :class:`ToolCall` and leaves the text."""
    calls: list[ToolCall] = []
    invalid = 0
    kept: list[str] = []
    position = 0
    for block in _BLOCK.finditer(text):
        kept.append(text[position : block.start()])
        position = block.end()
        try:
            call = _as_call(json.loads(block.group(1)))
        except json.JSONDecodeError:
            call = None
        if call is None:
            invalid += 1
            kept.append(block.group(0))
        else:
            calls.append(call)
    rest = text[position:]
    invalid += rest.count(TOOL_CALL_BEGIN)  # a call cut off before its end tag (the length limit)
    kept.append(rest)
    return ParsedToolCalls(text="".join(kept).strip(), tool_calls=calls, invalid=invalid)


def format_tool_call(call: ToolCall | Mapping[str, Any]) -> str:
    """``call`` as the block a Qwen/Hermes model writes (the inverse of :func:`parse_tool_calls`)."""
    parsed = call if isinstance(call, ToolCall) else ToolCall.from_dict(call)
    return f"{TOOL_CALL_BEGIN}\n{json.dumps(parsed.to_dict(), ensure_ascii=False)}\n{TOOL_CALL_END}"
