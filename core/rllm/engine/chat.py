"""Chat messages as model text and back: the ChatML layout Qwen models use, in pure Python.

An engine that answers :meth:`~rllm.engine.rollout.rollout_engine.RolloutEngine.get_model_response` turns the
workflow's messages into a prompt (a pretrained tokenizer's own template, or
:func:`render_chatml` for a model of this project's), samples, and turns the completion back
into content, reasoning and tool calls (:func:`split_completion`, :func:`completion_output`).
``check_messages`` is the one check of what a workflow passes, so every engine refuses the
same inputs with the same words.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from rllm.engine.messages import check_messages
from rllm.engine.rollout.rollout_engine import PROMPT_TOO_LONG, Generation, ModelOutput
from rllm.engine.tool_calls import ToolCall, format_tool_call, parse_tool_calls

__all__ = [
    "IM_END",
    "IM_START",
    "ChatParser",
    "Completion",
    "ConversationPrompts",
    "TemplateChatParser",
    "completion_output",
    "render_chatml",
    "split_completion",
]

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
"""ChatML's turn delimiters; a turn is ``<|im_start|>{role}\\n{content}<|im_end|>\\n``."""
THINK_BEGIN, THINK_END = "<think>", "</think>"


class ChatParser(Protocol):
    """What rLLM workflows ask of ``rollout_engine.chat_parser`` (its cumulative workflow renders prompts itself)."""

    def parse(
        self, messages: list[dict[str, Any]], add_generation_prompt: bool = False, is_first_msg: bool = False, **kw: Any
    ) -> str:
        """The prompt text of ``messages``, ending with the assistant's header when ``add_generation_prompt``."""
        ...


def _ids(encoded: Any) -> list[int]:
    if isinstance(encoded, dict) or hasattr(encoded, "input_ids"):
        encoded = encoded["input_ids"]
    return [int(token) for token in encoded]


def template_ids(tokenizer: Any, messages: Sequence[Mapping[str, Any]], **variables: Any) -> list[int]:
    """The prompt ids of ``messages`` under the tokenizer's chat template, ending with the assistant's header."""
    return _ids(tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=True, **variables))


class TemplateChatParser:
    """``rollout_engine.chat_parser`` over a tokenizer's own chat template (rLLM's cumulative workflow renders with it).

    ``is_first_msg`` is accepted for rLLM's signature; other keywords (``accumulate_reasoning``)
    reach the template as its variables. The rollouts of a task render the same messages, so the
    last ``CACHED_TEXTS`` (1,024) rendered texts and their ids are kept (a template is a pure function
    of the messages and variables, and a tokenizer of the text; one that asks for the time,
    ``strftime_now``, is rendered every call).
    """

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self._texts: dict[str, str] = {}
        self._ids: dict[str, list[int]] = {}
        self._template: Any = None

    def parse(
        self, messages: list[dict[str, Any]], add_generation_prompt: bool = False, is_first_msg: bool = False, **kw: Any
    ) -> str:
        checked = check_messages(messages)
        key = self._key(checked, add_generation_prompt, kw)
        text = self._texts.get(key) if key is not None else None
        if text is None:
            text = str(
                self.tokenizer.apply_chat_template(
                    checked, add_generation_prompt=add_generation_prompt, tokenize=False, **kw
                )
            )
            if key is not None:
                _keep(self._texts, key, text)
        return text

    def encode(self, text: str) -> list[int]:
        """``text``'s ids without special tokens added (a fresh list: the caller may extend it)."""
        ids = self._ids.get(text)
        if ids is None:
            ids = _ids(self.tokenizer.encode(text, add_special_tokens=False))
            _keep(self._ids, text, ids)
        return list(ids)

    def _key(self, messages: list[Mapping[str, Any]], generation_prompt: bool, variables: dict[str, Any]) -> str | None:
        """The cache key of one rendering, or None when it cannot be cached (a value JSON cannot write, a clock)."""
        template = getattr(self.tokenizer, "chat_template", None)
        if template is not self._template:  # a template set after the first call: what was kept is stale
            self._texts.clear()
            self._template = template
        if "strftime_now" in str(template):
            return None
        try:
            return json.dumps([messages, generation_prompt, variables], ensure_ascii=False)
        except (TypeError, ValueError):
            return None


CACHED_TEXTS = 1024
"""How many rendered prompts (and encoded texts) a :class:`TemplateChatParser` keeps, the oldest dropped first."""


def _keep(cache: dict[str, Any], key: str, value: Any) -> None:
    if len(cache) >= CACHED_TEXTS:
        del cache[next(iter(cache))]
    cache[key] = value


class ConversationPrompts:
    """One episode's chat prompts as ids, each extending the ids an earlier call was given and sampled.

    Re-encoding a conversation's text can give other ids than the model sampled (a BPE merge
    across the reply's end, a special token spelled out), which would train the model on
    tokens it never produced. So when the rendered prompt starts with the text of an earlier
    call's prompt and completion, that call's ids are kept and only the rest is encoded. A
    template that rewrites earlier turns (trims a reply, drops its reasoning) renders another
    text: the prompt is then encoded whole, and the trainer sees that it does not extend the
    previous turn. ``parser`` is the engine's, shared by its episodes (its cache with them).
    """

    def __init__(self, tokenizer: Any, parser: TemplateChatParser | None = None) -> None:
        self.tokenizer = tokenizer
        self.parser = parser if parser is not None else TemplateChatParser(tokenizer)
        self._sampled: list[tuple[str | None, list[int]]] = []
        """Each earlier call's prompt and completion ids, with their text once a later call has needed it."""

    def prompt_ids(self, messages: Sequence[Mapping[str, Any]], **variables: Any) -> list[int]:
        text = self.parser.parse(list(messages), add_generation_prompt=True, **variables)
        decoded = [
            (self.tokenizer.decode(ids, skip_special_tokens=False) if seen is None else seen, ids)
            for seen, ids in self._sampled
        ]
        self._sampled = [(seen, ids) for seen, ids in decoded]
        for seen, ids in sorted(decoded, key=lambda pair: -len(pair[0])):
            if text.startswith(seen):
                return ids + self.parser.encode(text[len(seen) :])
        return self.parser.encode(text)  # what the template gives, encoded once

    def sampled(self, prompt_ids: Sequence[int], completion_ids: Sequence[int]) -> None:
        """Remember one call's tokens, so a later turn that repeats them keeps these ids (a single-turn episode
        never decodes them)."""
        self._sampled.append((None, [*prompt_ids, *completion_ids]))


def _turn(role: str, text: str) -> str:
    return f"{IM_START}{role}\n{text}{IM_END}\n"


def _tools_prompt(tools: Sequence[Mapping[str, Any]]) -> str:
    schemas = "\n".join(json.dumps(dict(tool), ensure_ascii=False) for tool in tools)
    return (
        "# Tools\n\nYou may call one or more functions. Their signatures are within <tools></tools>:\n"
        f"<tools>\n{schemas}\n</tools>\n\nFor each call, write a JSON object with the function's name and arguments "
        'within <tool_call></tool_call> tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-object>}\n'
        "</tool_call>"
    )


def _assistant(message: Mapping[str, Any], accumulate_reasoning: bool) -> str:
    parts = []
    reasoning = (message.get("reasoning") or "").strip()
    if reasoning and accumulate_reasoning:
        parts.append(f"{THINK_BEGIN}\n{reasoning}\n{THINK_END}\n")
    content = (message.get("content") or "").strip()
    if content:
        parts.append(content)
    parts += [format_tool_call(call) for call in message.get("tool_calls") or []]
    return _turn("assistant", "\n".join(parts))


def render_chatml(
    messages: Sequence[Mapping[str, Any]],
    *,
    add_generation_prompt: bool = False,
    tools: Sequence[Mapping[str, Any]] = (),
    accumulate_reasoning: bool = False,
) -> str:
    """``messages`` in Qwen's ChatML layout, with the tools' schemas in the system turn.

    Tool results are user turns holding a ``<tool_response>`` block, as in Qwen's template;
    an assistant's reasoning is kept only with ``accumulate_reasoning`` (Qwen drops it from
    earlier turns). ``add_generation_prompt`` ends with the assistant's header.
    """
    checked = check_messages(messages)
    text = ""
    if tools and (not checked or checked[0]["role"] != "system"):
        text += _turn("system", _tools_prompt(tools))
    for i, message in enumerate(checked):
        role, content = message["role"], message["content"]
        if role == "system":
            text += _turn("system", f"{content}\n\n{_tools_prompt(tools)}" if tools and i == 0 else content)
        elif role == "user":
            text += _turn("user", content)
        elif role == "assistant":
            text += _assistant(message, accumulate_reasoning)
        else:
            text += _turn("user", f"<tool_response>\n{content}\n</tool_response>")
    if add_generation_prompt:
        text += f"{IM_START}assistant\n"
    return text


@dataclass
class Completion:
    """A completion's text, split: the answer, the reasoning before ``</think>``, the tool calls."""

    content: str
    reasoning: str
    tool_calls: list[ToolCall]
    invalid_tool_calls: int = 0
    """``<tool_call>`` blocks that are not a JSON call; their text stays in ``content``."""


def split_completion(text: str) -> Completion:
    """Split ``text`` (a completion, decoded with its special tokens) at ``</think>`` and at ``<tool_call>`` blocks.

    The text ends at the first ``<|im_end|>``. A ``<think>`` never closed (the length limit)
    makes everything reasoning.
    """
    text = text.split(IM_END, 1)[0]
    reasoning = ""
    if THINK_END in text:
        reasoning, text = text.split(THINK_END, 1)
    elif THINK_BEGIN in text:
        reasoning, text = text, ""
    reasoning = reasoning.strip().removeprefix(THINK_BEGIN).strip()
    parsed = parse_tool_calls(text)
    return Completion(
        content=parsed.text, reasoning=reasoning, tool_calls=parsed.tool_calls, invalid_tool_calls=parsed.invalid
    )


def completion_output(
    text: str,
    *,
    prompt_ids: list[int],
    completion_ids: list[int],
    logprobs: list[float] | None,
    finish_reason: str | None,
) -> ModelOutput:
    """The :class:`~rllm.engine.rollout.rollout_engine.ModelOutput` of one sampled completion, its text split by
    :func:`split_completion`.

    ``metrics["invalid_tool_calls"]`` counts the broken tool-call blocks.
    """
    parts = split_completion(text)
    return ModelOutput(
        text=text,
        content=parts.content,
        reasoning=parts.reasoning,
        tool_calls=parts.tool_calls,
        prompt_ids=list(prompt_ids),
        completion_ids=list(completion_ids),
        logprobs=None if logprobs is None else list(logprobs),
        prompt_length=len(prompt_ids),
        completion_length=len(completion_ids),
        finish_reason=finish_reason,
        metrics={"invalid_tool_calls": parts.invalid_tool_calls},
    )


def generation_output(generation: Generation) -> ModelOutput:
    """The :class:`ModelOutput` of one sampled generation; a prompt that was too long ends the episode.

    What every engine that samples token ids answers rLLM's chat calls with (OpenAI servers, Tinker).
    """
    from rllm.types import TerminationEvent, TerminationReason

    if generation.finish_reason == PROMPT_TOO_LONG:
        raise TerminationEvent(TerminationReason.MAX_PROMPT_LENGTH_EXCEEDED)
    return completion_output(
        generation.text,
        prompt_ids=generation.prompt_ids,
        completion_ids=generation.response_ids,
        logprobs=generation.logprobs,
        finish_reason=generation.finish_reason,
    )
