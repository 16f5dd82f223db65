"""OpenAIEngine against a real ``rllm serve`` process: the ids and log-probs it returns are the model's own.

Expected log-probs come from one forward pass of the same weights in this process (the tiny
model is built from its seed), not from the server's sampler.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from extras import skip_module_without
from serving import TINY_TEXT, running

skip_module_without("torch", "transformers", "safetensors", "fastapi", "uvicorn", install="pip install 'rllm[serve]'")

import torch

from rllm.config import load_config
from rllm.engine import OpenAIEngine
from rllm.errors import InferenceServerError
from rllm_transformers.model import load_policy


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with running(*TINY_TEXT) as root:
        yield f"{root}/v1"


@pytest.fixture(scope="module")
def policy() -> Any:
    return load_policy(load_config(overrides=list(TINY_TEXT)).rllm.transformers)


def _forward(model: Any, prompt: list[int], completion: list[int]) -> list[float]:
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + completion])).logits[0].float()
    log_p = torch.log_softmax(logits[len(prompt) - 1 : -1], dim=-1)
    return log_p.gather(-1, torch.tensor(completion)[:, None]).squeeze(-1).tolist()


def _engine(server: str, policy: Any, **options: Any) -> OpenAIEngine:
    engine = OpenAIEngine(base_url=server, tokenizer=policy.tokenizer, max_response_length=12, **options)
    engine.connect()
    return engine


def test_token_ids_in_and_out_equal_a_forward_pass(server: str, policy: Any) -> None:
    engine = _engine(server, policy)
    assert engine.model == "tiny" and engine.max_model_length == 256  # from /v1/models
    prompt = list(policy.tokenizer.encode("12+30=", add_special_tokens=False))
    generation = asyncio.run(engine.for_episode(3).generate(prompt, max_tokens=8))
    assert 1 <= len(generation.response_ids) <= 8 and generation.prompt_ids == prompt
    assert generation.logprobs == pytest.approx(_forward(policy.model, prompt, generation.response_ids), abs=1e-5)
    assert generation.weight_version == 0


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_chat_messages_give_the_sampled_ids_and_log_probs(server: str, policy: Any, endpoint: str) -> None:
    engine = _engine(server, policy, endpoint=endpoint)
    messages = [{"role": "user", "content": "What is 2+2?"}]
    output = asyncio.run(engine.get_model_response(messages, max_tokens=6))
    again = asyncio.run(engine.get_model_response(messages, max_tokens=6, seed=7))  # a caller's own seed goes too
    assert again.completion_ids == asyncio.run(engine.get_model_response(messages, max_tokens=6, seed=7)).completion_ids
    rendered = policy.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    expected_prompt = list(rendered["input_ids"] if hasattr(rendered, "keys") else rendered)
    assert output.prompt_ids == expected_prompt and 1 <= len(output.completion_ids) <= 6
    assert output.logprobs == pytest.approx(_forward(policy.model, expected_prompt, output.completion_ids), abs=1e-5)
    assert output.text == policy.tokenizer.decode(output.completion_ids, skip_special_tokens=True)


def test_the_episodes_of_one_engine_render_a_shared_prompt_once(
    server: str, policy: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rollouts of a task render the same messages: the engine's episodes share one template cache."""
    engine = _engine(server, policy)
    rendered: list[int] = []
    template = policy.tokenizer.apply_chat_template
    monkeypatch.setattr(
        policy.tokenizer, "apply_chat_template", lambda *a, **k: rendered.append(1) or template(*a, **k)
    )
    messages = [{"role": "user", "content": "What is 3+4?"}]
    outputs = [asyncio.run(engine.for_episode(seed).get_model_response(messages, max_tokens=2)) for seed in range(3)]
    assert len(rendered) == 1
    assert outputs[0].prompt_ids and all(o.prompt_ids == outputs[0].prompt_ids for o in outputs)


def test_64_concurrent_generations_complete(server: str, policy: Any) -> None:
    engine = _engine(server, policy, max_concurrency=64)
    prompt = list(policy.tokenizer.encode("7+5=", add_special_tokens=False))

    async def run() -> list[Any]:
        return await asyncio.gather(*(engine.for_episode(seed).generate(prompt, max_tokens=4) for seed in range(64)))

    generations = asyncio.run(run())
    assert len(generations) == 64 and all(1 <= len(g.response_ids) <= 4 for g in generations)
    assert engine.requests == 64


def test_a_server_with_another_tokenizer_is_refused(server: str) -> None:
    digits = load_policy(load_config(overrides=["rllm.transformers.model=tiny"]).rllm.transformers)
    engine = OpenAIEngine(base_url=server, tokenizer=digits.tokenizer)
    with pytest.raises(InferenceServerError, match="has another tokenizer than the trainer's") as caught:
        engine.connect()
    assert "\n" not in str(caught.value) and server in str(caught.value)
