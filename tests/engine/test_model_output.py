"""``ModelOutput``: rLLM's fields, at rLLM's paths, and a dict round-trip that keeps every field."""

from __future__ import annotations

import json

import pytest

from rllm.engine import ModelOutput, ToolCall
from rllm.errors import DataError

RLLM_FIELDS = [  # rllm-org/rllm 9beb6e0f, rllm/engine/rollout/rollout_engine.py, in order
    "text", "content", "reasoning", "tool_calls", "prompt_ids", "completion_ids", "multi_modal_inputs", "logprobs",
    "prompt_logprobs", "routing_matrices", "prompt_length", "completion_length", "finish_reason", "weight_version",
    "metrics",
]  # fmt: skip


def full_output() -> ModelOutput:
    return ModelOutput(
        text="<think>add</think>5<|im_end|>",
        content="5",
        reasoning="add",
        tool_calls=[ToolCall("calc", {"expr": "2+3"}), ToolCall("noop")],
        prompt_ids=[1, 2, 3],
        completion_ids=[7, 8],
        multi_modal_inputs={"pixel_values": [[0.5]]},
        logprobs=[-0.25, -1.5],
        prompt_logprobs=[-0.1, -0.2, -0.3],
        routing_matrices=["r0", "r1"],
        prompt_length=3,
        completion_length=2,
        finish_reason="stop",
        weight_version=4,
        metrics={"ttft": 0.01},
    )


def test_the_fields_are_rllms_in_order() -> None:
    assert list(full_output().to_dict()) == RLLM_FIELDS


def test_to_dict_from_dict_round_trips_every_field_through_json() -> None:
    output = full_output()
    data = json.loads(json.dumps(output.to_dict()))
    assert data["tool_calls"] == [{"name": "calc", "arguments": {"expr": "2+3"}}, {"name": "noop", "arguments": {}}]
    back = ModelOutput.from_dict(data)
    assert back == output
    assert isinstance(back.tool_calls[0], ToolCall)


@pytest.mark.parametrize("calls", [None, []])
def test_no_tool_calls_round_trip_as_given(calls: list[ToolCall] | None) -> None:
    assert ModelOutput.from_dict(ModelOutput(text="x", tool_calls=calls).to_dict()).tool_calls == calls


def test_a_dict_with_missing_and_null_keys_takes_the_defaults() -> None:
    output = ModelOutput.from_dict({"text": "hi", "prompt_length": None, "tool_calls": []})
    assert output == ModelOutput(text="hi", tool_calls=[])
    assert output.prompt_length == 0 and output.completion_ids is None


def test_an_unknown_key_is_refused_naming_it() -> None:
    with pytest.raises(DataError, match=r"no field 'completion_text'; its fields are text, content"):
        ModelOutput.from_dict({"text": "x", "completion_text": "y"})


def test_a_bad_tool_call_is_refused_naming_its_place() -> None:
    with pytest.raises(DataError, match=r"tool_calls\[1\] is \{'arguments': \{\}\}"):
        ModelOutput.from_dict({"tool_calls": [{"name": "a", "arguments": {}}, {"arguments": {}}]})


def test_one_logprob_per_completion_id() -> None:
    with pytest.raises(DataError, match="2 logprobs for 3 completion ids"):
        ModelOutput(completion_ids=[1, 2, 3], logprobs=[-0.1, -0.2])


def test_it_is_one_class_at_each_of_rllms_paths() -> None:
    from rllm.engine.rollout import ModelOutput as at_rollout
    from rllm.engine.rollout.rollout_engine import ModelOutput as at_module

    assert at_rollout is at_module is ModelOutput
