"""OpenAIEngine against a stub server: retries, refusals and answers it cannot train on, each one line."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
from stub_server import Reply, Stub, stub_server

from rllm.engine import PROMPT_TOO_LONG, OpenAIEngine
from rllm.errors import EngineCallError, InferenceServerError, RLLMWarning

MODELS = {"object": "list", "data": [{"id": "stub", "object": "model", "max_model_len": 32}]}


def completion(ids: list[int], logprobs: list[float] | None, **extra: Any) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": 0, "text": "x" * len(ids), "finish_reason": "length", "token_ids": ids}
    choice["logprobs"] = None if logprobs is None else {"token_logprobs": logprobs}
    return {"choices": [{**choice, **extra}], "weight_version": 5}


@pytest.fixture
def stub() -> Iterator[Stub]:
    with stub_server() as server:
        yield server


def _engine(stub: Stub, reply: Any, **options: Any) -> OpenAIEngine:
    def answer(path: str, body: Any) -> Reply:
        return (200, MODELS) if path == "/v1/models" else reply(path, body)

    stub.reply = answer
    settings = {"api_retries": 2, "retry_backoff": 0.01, "timeout": 5.0, **options}
    return OpenAIEngine(base_url=f"{stub.root}/v1", **settings)


def _one_line(exc: pytest.ExceptionInfo[BaseException]) -> str:
    message = str(exc.value)
    assert "\n" not in message
    return message


def test_a_good_answer_is_the_generation_with_the_servers_version(stub: Stub) -> None:
    engine = _engine(stub, lambda path, body: (200, completion([7, 8], [-0.5, -0.25])), sampling_params={"top_k": 3})
    generation = asyncio.run(engine.generate([1, 2, 3], max_tokens=4))
    assert (generation.response_ids, generation.logprobs, generation.weight_version) == ([7, 8], [-0.5, -0.25], 5)
    sent = stub.seen[-1][1]
    assert sent["prompt"] == [1, 2, 3] and sent["max_tokens"] == 4 and sent["return_token_ids"] is True
    assert sent["logprobs"] == 0 and sent["model"] == "stub" and sent["top_k"] == 3


def test_the_context_limit_is_checked_before_sending(stub: Stub) -> None:
    engine = _engine(stub, lambda path, body: (200, completion([1] * body["max_tokens"], [0.0] * body["max_tokens"])))
    asyncio.run(engine.generate(list(range(28)), max_tokens=16))
    assert stub.seen[-1][1]["max_tokens"] == 4  # 32 - 28: what the context leaves
    sent = len(stub.seen)
    assert asyncio.run(engine.generate(list(range(32)), max_tokens=16)).finish_reason == PROMPT_TOO_LONG
    engine.max_prompt_length = 10
    assert asyncio.run(engine.generate(list(range(11)))).finish_reason == PROMPT_TOO_LONG
    assert len(stub.seen) == sent  # neither was sent


def test_a_down_server_is_retried_then_one_line_naming_the_url() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    engine = OpenAIEngine(base_url=f"http://127.0.0.1:{port}/v1", api_retries=2, retry_backoff=0.05, timeout=2)
    started = time.monotonic()
    with pytest.raises(InferenceServerError) as caught:
        asyncio.run(engine.generate([1]))
    message = _one_line(caught)
    assert message.startswith(f"http://127.0.0.1:{port}/v1/models: no answer (")
    assert "after 3 attempts; start the server or fix rllm.rollout.openai.base_url." in message
    assert time.monotonic() - started >= 0.05 + 0.1  # the back-off doubled between attempts


@pytest.mark.parametrize(("status", "attempts"), [(400, 1), (404, 1), (500, 3), (503, 3), (429, 3)])
def test_4xx_is_refused_at_once_5xx_and_429_are_retried(stub: Stub, status: int, attempts: int) -> None:
    engine = _engine(stub, lambda path, body: (status, {"error": {"message": f"said {status}"}}))
    with pytest.raises(InferenceServerError) as caught:
        asyncio.run(engine.generate([1, 2]))
    message = _one_line(caught)
    assert f"{stub.root}/v1/completions" in message and f"HTTP {status}: said {status}" in message
    assert sum(path == "/v1/completions" for path, _ in stub.seen) == attempts


def test_a_timeout_is_retried_then_named(stub: Stub) -> None:
    engine = _engine(stub, lambda path, body: (200, completion([1], [0.0])), timeout=0.2, api_retries=1)
    engine.connect()
    stub.delay = 0.5
    with pytest.raises(InferenceServerError) as caught:
        asyncio.run(engine.generate([1]))
    assert f"{stub.root}/v1/completions: no answer within 0.2 s after 2 attempts" in _one_line(caught)


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        ({"choices": [{"text": "hi", "logprobs": {"token_logprobs": [0.0]}}]}, "without choices[0].token_ids; it"),
        (completion([4], None), "without choices[0].logprobs.token_logprobs"),
        (completion([4, 5], [0.0]), "answered 2 token ids with 1 log-probs"),
        (completion([4, 5, 6], [0.0, 0.0, 0.0]), "answered 3 tokens when 2 were asked for"),
        (completion([4], [0.0], prompt_token_ids=[9, 9]), "other prompt ids than it was sent"),
        ({"choices": []}, "without choices"),
    ],
)
def test_an_answer_that_cannot_be_trained_on_is_one_line(stub: Stub, answer: dict[str, Any], said: str) -> None:
    engine = _engine(stub, lambda path, body: (200, answer))
    with pytest.raises(InferenceServerError) as caught:
        asyncio.run(engine.generate([1, 2], max_tokens=2))
    message = _one_line(caught)
    assert said in message and f"{stub.root}/v1/completions" in message


def test_chat_needs_prompt_ids_and_log_probs(stub: Stub) -> None:
    def reply(path: str, body: Any) -> Reply:
        choice = {"index": 0, "message": {"role": "assistant", "content": "Hi"}, "token_ids": [3], "logprobs": None}
        return 200, {"choices": [choice], "prompt_token_ids": [1, 2]}

    engine = _engine(stub, reply)
    with pytest.raises(InferenceServerError) as caught:
        asyncio.run(engine.get_model_response([{"role": "user", "content": "hello"}]))
    assert "without choices[0].logprobs.content" in _one_line(caught)


def test_seed_requests_false_sends_no_seed_but_a_callers_own(stub: Stub) -> None:
    stub.reply = lambda path, body: (200, MODELS) if path == "/v1/models" else (200, completion([1], [0.0]))
    engine = OpenAIEngine(base_url=f"{stub.root}/v1", retry_backoff=0.01, seed_requests=False)

    async def run() -> None:
        view = engine.for_episode(3)
        await view.generate([1])
        await engine.generate([1])

    asyncio.run(run())
    bodies = [body for path, body in stub.seen if path == "/v1/completions"]
    assert len(bodies) == 2 and all("seed" not in body for body in bodies)
    assert engine._sampling(5, {"seed": 7})["seed"] == 7  # a get_model_response(seed=7) still sends its own


def test_token_in_token_out_takes_the_callers_seed_at_both_doors(stub: Stub) -> None:
    engine = _engine(stub, lambda path, body: (200, completion([7], [-0.5])))

    async def run() -> None:
        await engine.get_token_output_from_token_input([1, 2], seed=7)
        await engine.for_episode(3).get_token_output_from_token_input([1, 2], seed=11, max_tokens=1)

    asyncio.run(run())
    sent = [body for path, body in stub.seen if path == "/v1/completions"]
    assert [body["seed"] for body in sent] == [7, 11]
    for bad in (True, -1, 2**63, 1.5, "7"):
        with pytest.raises(EngineCallError, match=r"got seed=.*; give an int in \[0, 2\*\*63\)") as caught:
            asyncio.run(engine.get_token_output_from_token_input([1, 2], seed=bad))
        _one_line(caught)


def test_episodes_stick_to_one_server_and_seed_their_requests(stub: Stub) -> None:
    with stub_server() as other:
        for server in (stub, other):
            server.reply = lambda path, body: (200, MODELS) if path == "/v1/models" else (200, completion([1], [0.0]))
        engine = OpenAIEngine(base_url=[f"{stub.root}/v1", f"{other.root}/v1"], retry_backoff=0.01)

        async def episode(seed: int) -> None:
            view = engine.for_episode(seed)
            for _ in range(3):
                await view.generate([1])

        async def run() -> None:
            await asyncio.gather(*(episode(seed) for seed in range(8)))

        asyncio.run(run())
        calls = [body for server in (stub, other) for path, body in server.seen if path == "/v1/completions"]
        by_session: dict[str, set[int]] = {}
        for server_index, server in enumerate((stub, other)):
            for path, body in server.seen:
                if path == "/v1/completions":
                    by_session.setdefault(body["user"], set()).add(server_index)
        assert len(calls) == 24 and len(by_session) == 8 and all(len(s) == 1 for s in by_session.values())
        assert {i for s in by_session.values() for i in s} == {0, 1}  # both servers are used
        first = [body["seed"] for body in calls if body["user"] == "episode-3"]
        stub.seen.clear()
        other.seen.clear()
        asyncio.run(episode(3))
        again = [body["seed"] for s in (stub, other) for path, body in s.seen if path == "/v1/completions"]
        assert sorted(again) == sorted(first) and len(set(first)) == 3


def test_a_server_that_lost_the_weights_is_resynced_once_then_asked_again(stub: Stub) -> None:
    held = {"version": 0}  # restarted: its initial weights, whatever the trainer pushed before

    def reply(path: str, body: Any) -> Reply:
        return 200, {**completion([7], [-0.5]), "weight_version": held["version"]}

    engine = _engine(stub, reply)
    engine.weight_version = 3
    pushed: list[str] = []

    def resync(server: str) -> None:
        pushed.append(server)
        held["version"] = 3

    engine.resync = resync

    async def many() -> list[Any]:
        return list(await asyncio.gather(*(engine.generate([1, 2]) for _ in range(8))))

    with pytest.warns(RLLMWarning, match=r"/v1 lost the policy's weights \(weight_version 0 where 3 was expected"):
        generations = asyncio.run(many())
    assert pushed == [f"{stub.root}/v1"]  # one push however many requests saw the loss
    assert [g.weight_version for g in generations] == [3] * 8
    assert engine.resyncs == {f"{stub.root}/v1": 1}


def test_a_server_that_does_not_keep_the_weights_it_is_sent_is_one_line(stub: Stub) -> None:
    engine = _engine(stub, lambda path, body: (200, {**completion([7], [-0.5]), "weight_version": 0}))
    engine.weight_version, engine.resync = 2, lambda server: None
    with pytest.warns(RLLMWarning), pytest.raises(InferenceServerError) as caught:
        asyncio.run(engine.generate([1]))
    assert _one_line(caught) == (
        f"{stub.root}/v1/completions answered with weight_version 0 after it was given the policy's weights "
        "(version 2) again; it does not keep the weights it is sent."
    )


def test_without_a_resync_another_version_is_the_servers_to_report(stub: Stub) -> None:
    engine = _engine(stub, lambda path, body: (200, completion([7], [-0.5])))  # version 5, the engine's 0
    assert asyncio.run(engine.generate([1])).weight_version == 5


LOGPROBS = "choices[0].logprobs.token_logprobs"


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (completion([4], [float("nan")]), f"{LOGPROBS}[0] = nan; a log-prob must be a finite number <= 0"),
        (completion([4, 5], [-0.1, float("-inf")]), f"{LOGPROBS}[1] = -inf"),
        (completion([4], [float("inf")]), f"{LOGPROBS}[0] = inf"),
        (completion([4], [0.5]), f"{LOGPROBS}[0] = 0.5"),
        (completion([4], [True]), f"{LOGPROBS}[0] = True"),
        (completion([4], [None]), f"{LOGPROBS}[0] = None"),
        (completion([4], ["-0.1"]), f"{LOGPROBS}[0] = '-0.1'"),
        (completion([True], [-0.1]), "choices[0].token_ids[0] = True, which is not a token id"),
        (completion([4, -1], [-0.1, -0.1]), "choices[0].token_ids[1] = -1, which is not a token id"),
        (completion([4.0], [-0.1]), "choices[0].token_ids[0] = 4.0, which is not a token id"),
        ({**completion([4], [-0.1]), "weight_version": "five"}, "weight_version = 'five'; it must be an integer"),
        ({**completion([4], [-0.1]), "weight_version": True}, "weight_version = True; it must be an integer"),
        ({**completion([4], [-0.1]), "weight_version": float("nan")}, "weight_version = nan"),
    ],
)
def test_a_number_the_server_answers_is_checked_where_it_is_read(stub: Stub, answer: dict[str, Any], said: str) -> None:
    engine = _engine(stub, lambda path, body: (200, answer))
    with pytest.raises(InferenceServerError) as caught:
        asyncio.run(engine.generate([1, 2], max_tokens=2))
    message = _one_line(caught)
    assert said in message and f"{stub.root}/v1/completions" in message, message


def test_rounding_above_zero_is_read_as_zero_and_more_is_refused(stub: Stub) -> None:
    engine = _engine(stub, lambda path, body: (200, completion([4, 5], [6e-8, -0.25])))
    assert asyncio.run(engine.generate([1, 2], max_tokens=2)).logprobs == [0.0, -0.25]
    engine = _engine(stub, lambda path, body: (200, completion([4], [0.002])))
    with pytest.raises(InferenceServerError, match=r"token_logprobs\[0\] = 0.002"):
        asyncio.run(engine.generate([1, 2], max_tokens=2))


def test_token_ids_beyond_the_trainers_vocabulary_are_refused(stub: Stub) -> None:
    class Tokenizer:  # only its size is read on this path
        def __len__(self) -> int:
            return 10

    engine = _engine(stub, lambda path, body: (200, completion([9, 10], [-0.1, -0.1])))
    engine.tokenizer, engine._connected = Tokenizer(), True
    engine.model = "stub"
    with pytest.raises(InferenceServerError) as caught:
        asyncio.run(engine.generate([1, 2], max_tokens=2))
    assert "choices[0].token_ids[1] = 10, which is not a token id (0..9" in _one_line(caught)


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ([{"logprob": float("nan")}], "choices[0].logprobs.content[0].logprob = nan"),
        ([{"logprob": 3.0}], "choices[0].logprobs.content[0].logprob = 3.0"),
        (["x"], "choices[0].logprobs.content[0].logprob = None"),
    ],
)
def test_chat_log_probs_are_checked_too(stub: Stub, content: list[Any], said: str) -> None:
    def reply(path: str, body: Any) -> Reply:
        choice = {"index": 0, "message": {"content": "Hi"}, "token_ids": [3], "logprobs": {"content": content}}
        return 200, {"choices": [choice], "prompt_token_ids": [1, 2]}

    engine = _engine(stub, reply)
    with pytest.raises(InferenceServerError) as caught:
        asyncio.run(engine.get_model_response([{"role": "user", "content": "hello"}]))
    assert said in _one_line(caught)


def test_chat_prompt_ids_are_checked(stub: Stub) -> None:
    def reply(path: str, body: Any) -> Reply:
        choice = {
            "index": 0,
            "message": {"content": "Hi"},
            "token_ids": [3],
            "logprobs": {"content": [{"logprob": -1}]},
        }
        return 200, {"choices": [choice], "prompt_token_ids": [1, False]}

    engine = _engine(stub, reply)
    with pytest.raises(InferenceServerError) as caught:
        asyncio.run(engine.get_model_response([{"role": "user", "content": "hello"}]))
    assert "prompt_token_ids[1] = False, which is not a token id" in _one_line(caught)


@pytest.mark.parametrize(("limit", "said"), [(1, "max_model_len = 1; it must be an integer >= 2"), ("4k", "'4k'")])
def test_an_unusable_max_model_len_is_one_line_naming_it(stub: Stub, limit: Any, said: str) -> None:
    models = {"data": [{"id": "stub", "max_model_len": limit}]}
    stub.reply = lambda path, body: (200, models)
    engine = OpenAIEngine(base_url=f"{stub.root}/v1", api_retries=0, timeout=5.0)
    with pytest.raises(InferenceServerError) as caught:
        asyncio.run(engine.generate([1]))
    message = _one_line(caught)
    assert f"{stub.root}/v1/models answered max_model_len" in message and said in message
