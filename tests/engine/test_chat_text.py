"""The text helpers: ChatML prompts, completions split into reasoning, content and Qwen/Hermes tool calls."""

from __future__ import annotations

import pytest

from rllm.engine import ToolCall
from rllm.engine.chat import completion_output, render_chatml, split_completion
from rllm.engine.tool_calls import format_tool_call, parse_tool_calls
from rllm.errors import DataError, EngineCallError

WEATHER = '<tool_call>\n{"name": "weather", "arguments": {"city": "Oslo"}}\n</tool_call>'


def test_a_tool_call_block_becomes_a_call_and_leaves_the_text() -> None:
    parsed = parse_tool_calls(f"Let me look.\n{WEATHER}\n")
    assert parsed.tool_calls == [ToolCall("weather", {"city": "Oslo"})]
    assert parsed.text == "Let me look." and parsed.invalid == 0


def test_two_calls_in_order_and_text_between_them_kept() -> None:
    parsed = parse_tool_calls(
        '<tool_call>{"name": "a", "arguments": {}}</tool_call> and <tool_call>{"name": "b"}</tool_call>'
    )
    assert [call.name for call in parsed.tool_calls] == ["a", "b"] and parsed.text == "and"
    assert parsed.tool_calls[1].arguments == {}


def test_arguments_written_as_a_json_string_and_openais_function_form_are_read() -> None:
    parsed = parse_tool_calls(
        '<tool_call>{"name": "f", "arguments": "{\\"x\\": 1}"}</tool_call>'
        '<tool_call>{"function": {"name": "g", "arguments": {"y": 2}}}</tool_call>'
    )
    assert parsed.tool_calls == [ToolCall("f", {"x": 1}), ToolCall("g", {"y": 2})]


@pytest.mark.parametrize(
    "block",
    [
        "<tool_call>{name: weather}</tool_call>",  # not JSON
        '<tool_call>["weather"]</tool_call>',  # JSON, not an object
        '<tool_call>{"arguments": {"city": "Oslo"}}</tool_call>',  # no name
        '<tool_call>{"name": "w", "arguments": [1]}</tool_call>',  # arguments not an object
        '<tool_call>{"name": "w", "arguments": "not json"}</tool_call>',
    ],
)
def test_a_block_that_is_not_a_json_call_stays_text_and_is_counted(block: str) -> None:
    parsed = parse_tool_calls(f"before {block} {WEATHER}")
    assert parsed.text == f"before {block}"
    assert parsed.tool_calls == [ToolCall("weather", {"city": "Oslo"})] and parsed.invalid == 1


def test_a_call_cut_off_before_its_end_tag_is_counted() -> None:
    parsed = parse_tool_calls(f'{WEATHER}<tool_call>{{"name": "weath')
    assert parsed.invalid == 1 and len(parsed.tool_calls) == 1
    assert parsed.text == '<tool_call>{"name": "weath'


def test_format_and_parse_are_inverse() -> None:
    call = ToolCall("search", {"query": "größe", "k": 3})
    assert (
        format_tool_call(call)
        == '<tool_call>\n{"name": "search", "arguments": {"query": "größe", "k": 3}}\n</tool_call>'
    )
    assert parse_tool_calls(format_tool_call(call)).tool_calls == [call]
    assert format_tool_call({"function": {"name": "search", "arguments": '{"k": 3}'}}).count('"k": 3') == 1
    with pytest.raises(DataError, match=r"tool call is \{'args': 1\}; give a dict with a string 'name'"):
        format_tool_call({"args": 1})


def test_render_chatml_writes_qwens_layout() -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Oslo?"},
        {
            "role": "assistant",
            "content": None,
            "reasoning": "use the tool",
            "tool_calls": [ToolCall("weather", {"city": "Oslo"})],
        },
        {"role": "tool", "content": "rain"},
    ]
    assert render_chatml(messages, add_generation_prompt=True) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\nWeather in Oslo?<|im_end|>\n"
        f"<|im_start|>assistant\n{WEATHER}<|im_end|>\n"
        "<|im_start|>user\n<tool_response>\nrain\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    with_reasoning = render_chatml(messages[1:3], accumulate_reasoning=True)
    assert with_reasoning.endswith(f"<|im_start|>assistant\n<think>\nuse the tool\n</think>\n\n{WEATHER}<|im_end|>\n")


def test_tools_go_into_the_system_turn_or_a_system_turn_of_their_own() -> None:
    tools = [{"type": "function", "function": {"name": "weather"}}]
    schema = '{"type": "function", "function": {"name": "weather"}}'
    alone = render_chatml([{"role": "user", "content": "q"}], tools=tools)
    assert alone.startswith("<|im_start|>system\n# Tools\n") and f"<tools>\n{schema}\n</tools>" in alone
    assert alone.endswith("<|im_start|>user\nq<|im_end|>\n") and alone.count("<|im_start|>system") == 1
    joined = render_chatml([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "q"}], tools=tools)
    assert joined.startswith("<|im_start|>system\nBe brief.\n\n# Tools\n") and joined.count("<|im_start|>system") == 1


def test_render_chatml_refuses_what_is_not_a_message_list() -> None:
    with pytest.raises(EngineCallError, match=r"messages\[0\]\['role'\] is 'bot'"):
        render_chatml([{"role": "bot", "content": "x"}])


def test_split_completion_reads_reasoning_content_and_calls_up_to_the_end_of_turn() -> None:
    parts = split_completion(f"<think>\nOslo is a city.\n</think>\n\nChecking.\n{WEATHER}<|im_end|>ignored")
    assert parts.reasoning == "Oslo is a city." and parts.content == "Checking."
    assert parts.tool_calls == [ToolCall("weather", {"city": "Oslo"})] and parts.invalid_tool_calls == 0
    plain = split_completion("The answer is 5")
    assert (plain.content, plain.reasoning, plain.tool_calls) == ("The answer is 5", "", [])
    cut = split_completion("<think>still thinking when the limit came")
    assert (cut.content, cut.reasoning) == ("", "still thinking when the limit came")


def test_completion_output_keeps_the_sampled_tokens_and_counts_broken_calls() -> None:
    output = completion_output(
        "5 <tool_call>{oops}</tool_call>", prompt_ids=[1, 2, 3], completion_ids=[9, 9], logprobs=[-1.0, -2.0],
        finish_reason="length",
    )  # fmt: skip
    assert output.content == "5 <tool_call>{oops}</tool_call>" and output.tool_calls == []
    assert output.metrics == {"invalid_tool_calls": 1}
    assert (output.prompt_length, output.completion_length, output.finish_reason) == (3, 2, "length")
    assert output.completion_ids == [9, 9] and output.logprobs == [-1.0, -2.0] and output.text.startswith("5 ")
