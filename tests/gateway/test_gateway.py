"""The gateway driven by the stock ``openai`` client: answers from the session's engine, each call recorded.

The engine is a script whose ids and log-probs are written out here, so what the client
receives and what the session records are checked against those numbers, not against the
gateway's own arithmetic.
"""

from __future__ import annotations

import asyncio
from typing import Any

from extras import skip_module_without

skip_module_without("openai", install="pip install 'rllm[test]'")

import openai
from scripted_engine import REPLY_IDS, Scripted
from serving import post_json

from rllm.engine import ModelOutput, RolloutEngine
from rllm.gateway import Gateway, Session
from rllm.types import Step


def _with_session(gateway: Gateway, engine: RolloutEngine, client_calls: Any) -> tuple[Any, list[Step], Session]:
    """Open a session on a running loop, run ``client_calls(session)`` on a thread (as a flow does), close it."""

    async def main() -> tuple[Any, list[Step], Session]:
        session = gateway.open(engine, asyncio.get_running_loop())
        try:
            result = await asyncio.to_thread(client_calls, session)
        finally:
            steps = gateway.close(session)
        return result, steps, session

    return asyncio.run(main())


def _client(session: Session) -> openai.OpenAI:
    return openai.OpenAI(base_url=session.base_url, api_key="unused", max_retries=0)


def test_a_chat_call_returns_the_engines_ids_and_log_probs_and_becomes_a_step(gateway: Gateway) -> None:
    engine = Scripted()
    engine.weight_version = 3

    def call(session: Session) -> Any:
        return _client(session).chat.completions.create(
            model="policy",
            messages=[{"role": "user", "content": "3 9?"}],
            max_tokens=6,
            logprobs=True,
            extra_body={"return_token_ids": True},
        )

    answer, steps, session = _with_session(gateway, engine, call)
    assert session.base_url == f"http://127.0.0.1:{gateway.port}/sessions/{session.id}/v1"
    extra = answer.model_extra
    assert answer.choices[0].message.content == "Answer"
    assert answer.choices[0].model_extra["token_ids"] == [65, 110, 115, 119, 101, 114] == REPLY_IDS[:6]
    assert extra["prompt_token_ids"] == [51, 32, 57, 63]
    assert [t.logprob for t in answer.choices[0].logprobs.content] == [-0.25, -0.5, -0.75, -1.0, -1.25, -1.5]
    assert extra["weight_version"] == 3 and engine.calls == [{"max_tokens": 6}]
    (step,) = steps
    assert isinstance(step.model_output, ModelOutput) and step.model_output.weight_version == 3
    assert step.prompt_ids == [51, 32, 57, 63] and step.response_ids == REPLY_IDS[:6]
    assert step.logprobs == [-0.25, -0.5, -0.75, -1.0, -1.25, -1.5]
    assert step.chat_completions[0] == {"role": "user", "content": "3 9?"}
    assert step.chat_completions[-1]["content"] == "Answer"


def test_a_completion_prompt_is_sampled_token_in_token_out(gateway: Gateway) -> None:
    engine = Scripted()

    def call(session: Session) -> Any:
        return _client(session).completions.create(
            model="policy", prompt="ab", max_tokens=2, logprobs=0, extra_body={"return_token_ids": True}
        )

    answer, (step,), _ = _with_session(gateway, engine, call)
    choice = answer.choices[0]
    assert choice.text == "An" and choice.model_extra["token_ids"] == [65, 110]
    assert choice.model_extra["prompt_token_ids"] == [97, 98]
    assert choice.logprobs.token_logprobs == [-0.25, -0.5]
    assert step.prompt_ids == [97, 98] and step.response_ids == [65, 110] and step.observation == "ab"


def test_calls_of_two_sessions_are_recorded_apart_and_in_order(gateway: Gateway) -> None:
    engine = Scripted()

    def three(session: Session) -> None:
        client = _client(session)
        for text in ("one", "two", "three"):
            client.chat.completions.create(model="policy", messages=[{"role": "user", "content": text}])

    async def main() -> tuple[list[Step], list[Step]]:
        loop = asyncio.get_running_loop()
        first, second = gateway.open(engine, loop), gateway.open(engine, loop)
        await asyncio.gather(asyncio.to_thread(three, first), asyncio.to_thread(three, second))
        return gateway.close(first), gateway.close(second)

    for steps in asyncio.run(main()):
        assert [s.chat_completions[0]["content"] for s in steps] == ["one", "two", "three"]


_status = post_json


def test_refusals_are_openai_error_bodies_naming_the_field(gateway: Gateway) -> None:
    engine = Scripted()
    message = [{"role": "user", "content": "x"}]

    def calls(session: Session) -> list[tuple[int, dict[str, Any]]]:
        url = f"{session.base_url}/chat/completions"
        return [
            _status(url, {"model": "gpt-4", "messages": message}),
            _status(url, {"model": "policy", "messages": message, "frequency_penalty": 1}),
            _status(url, {"model": "policy", "messages": message, "temperature": 0.5}),
            _status(url, {"model": "policy", "messages": message, "n": 2}),
            _status(url, {"model": "policy", "messages": "hi"}),
            _status(f"{session.base_url}/models"),
        ]

    answers, steps, session = _with_session(gateway, engine, calls)
    wrong_model, unknown, sampling, several, bad_messages, models = answers
    assert wrong_model[0] == 404 and wrong_model[1]["error"]["code"] == "model_not_found"
    assert unknown[0] == 400 and unknown[1]["error"]["param"] == "frequency_penalty"
    assert sampling[0] == 400 and "does not take temperature" in sampling[1]["error"]["message"]
    assert several[0] == 400 and several[1]["error"]["param"] == "n"
    assert bad_messages[0] == 400 and bad_messages[1]["error"]["param"] == "messages"
    assert models == (
        200,
        {"object": "list", "data": [{"id": "policy", "object": "model", "created": 0, "owned_by": "rllm"}]},
    )
    assert steps == [] and session.errors == ["Scripted does not take temperature"]
    closed = _status(f"{session.base_url}/chat/completions", {"model": "policy", "messages": message})
    assert closed[0] == 404 and "has ended" in closed[1]["error"]["message"]
    assert _status(f"{gateway.url}/health") == (200, {"status": "ok", "sessions": 0})
