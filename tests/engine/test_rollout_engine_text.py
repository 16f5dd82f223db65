"""rLLM's text interface of ``RolloutEngine``: ``get_model_response`` checks the messages, stamps the weight version."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from rllm.engine import Generation, ModelOutput, RolloutEngine, engine_problem
from rllm.errors import EngineCallError


class Parrot(RolloutEngine):
    """Answers with the last message; an update lands while it samples (the version moves during the call)."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[dict[str, Any]], dict[str, Any]]] = []

    async def _get_model_response(self, messages: list[dict[str, Any]], **kwargs: Any) -> ModelOutput:
        self.calls.append((messages, kwargs))
        self.weight_version += 1
        return ModelOutput(
            text=messages[-1]["content"], content=messages[-1]["content"], completion_ids=[], logprobs=[]
        )


def ask(engine: RolloutEngine, messages: Any, **kwargs: Any) -> ModelOutput:
    return asyncio.run(engine.get_model_response(messages, **kwargs))


def test_the_answer_carries_the_version_it_was_sampled_with() -> None:
    engine = Parrot()
    engine.weight_version = 3
    output = ask(engine, [{"role": "user", "content": "hi"}], max_tokens=5)
    assert output.content == "hi" and output.weight_version == 3 and engine.weight_version == 4
    assert engine.calls == [([{"role": "user", "content": "hi"}], {"max_tokens": 5})]
    assert ask(engine, [{"role": "user", "content": "again"}]).weight_version == 4


def test_a_new_engine_starts_at_version_zero_with_rllms_attributes() -> None:
    engine = Parrot()
    assert engine.weight_version == 0 and engine.chat_parser is None and engine.tokenizer is None
    assert engine.is_validation is False and engine.supports_token_in_token_out is False
    assert asyncio.run(engine.wake_up()) is None and asyncio.run(engine.sleep()) is None


@pytest.mark.parametrize(
    ("messages", "words"),
    [
        ("hello", "messages is a str; pass a list of dicts"),
        ([["user", "hi"]], r"messages\[0\] is a list; each message is a dict with 'role'"),
        ([{"role": "user", "content": "a"}, {"role": "human", "content": "b"}], r"messages\[1\]\['role'\] is 'human'"),
        ([{"content": "a"}], r"messages\[0\]\['role'\] is None; use one of system, user, assistant, tool"),
        ([{"role": "user", "content": 3}], r"messages\[0\]\['content'\] \(user\) is int; give a string"),
        ([{"role": "user", "content": None}], r"messages\[0\]\['content'\] \(user\) is NoneType"),
    ],
)
def test_messages_that_are_not_role_content_dicts_are_refused_before_sampling(messages: Any, words: str) -> None:
    engine = Parrot()
    with pytest.raises(EngineCallError, match=words):
        ask(engine, messages)
    assert engine.calls == []


def test_an_assistant_turn_that_only_calls_tools_may_have_no_content() -> None:
    engine = Parrot()
    messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": None, "tool_calls": []}]
    messages.append({"role": "tool", "content": "42"})
    assert ask(engine, messages).content == "42"


def test_an_answer_that_is_not_a_model_output_is_refused_naming_the_engine() -> None:
    class Sloppy(RolloutEngine):
        async def _get_model_response(self, messages: list[dict[str, Any]], **kwargs: Any) -> Any:
            return "5"

    with pytest.raises(
        EngineCallError, match=r"Sloppy._get_model_response returned a str; return an rllm.engine.Model"
    ):
        ask(Sloppy(), [{"role": "user", "content": "q"}])


def test_what_an_engine_does_not_implement_says_what_to_implement() -> None:
    class TokensOnly(RolloutEngine):
        async def generate(self, prompt_ids: Any, max_tokens: int | None = None) -> Generation:
            return Generation(response_ids=[1], logprobs=[0.0], text="a")

    engine = TokensOnly()
    assert engine_problem(engine) is None  # still a token-level engine
    with pytest.raises(NotImplementedError, match=r"TokensOnly does not answer chat messages: implement async _get_mo"):
        ask(engine, [{"role": "user", "content": "q"}])
    with pytest.raises(NotImplementedError, match="implement get_token_output_from_token_input and assemble_model"):
        asyncio.run(engine.get_token_output_from_token_input([1, 2]))
    with pytest.raises(NotImplementedError, match="TokensOnly does not implement assemble_model_output"):
        engine.assemble_model_output([1], None)
