"""Requests ``rllm serve`` refuses, and weights that do not fit a live model, refused whole at every door.

``rllm serve``'s two weight routes are driven in-process (Starlette's test client, no socket);
after each refusal the served tensors are compared bit for bit with a copy taken before it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from extras import skip_module_without
from serving import TINY_TEXT

skip_module_without(
    "torch", "transformers", "safetensors", "fastapi", "uvicorn", "httpx", install="pip install 'rllm[serve,test]'"
)

import torch
from fastapi.testclient import TestClient
from safetensors.torch import save

from rllm.config import load_config
from rllm.errors import CheckpointError
from rllm_transformers.checkpoint import load_training_state, save_training_state
from rllm_transformers.model import load_policy
from rllm_transformers.serve import Server, build_app
from rllm_transformers.weights import load_checked, weights_problem

MODEL = TINY_TEXT


def _policy(*extra: str) -> Any:
    return load_policy(load_config(overrides=[*MODEL, *extra]).rllm.transformers)


@pytest.fixture(scope="module")
def served() -> tuple[Server, TestClient]:
    server = Server(_policy(), "tiny", 0)
    return server, TestClient(build_app(server), raise_server_exceptions=False)


def _snapshot(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}


def _same(model: torch.nn.Module, before: dict[str, torch.Tensor]) -> bool:
    after = model.state_dict()
    return after.keys() == before.keys() and all(torch.equal(after[k], before[k]) for k in before)


def _other_state() -> dict[str, torch.Tensor]:
    """A fitting state dict with other values (another seed), each tensor its own copy (safetensors refuses ties)."""
    return {name: tensor.clone() for name, tensor in _policy("rllm.transformers.seed=5").model.state_dict().items()}


def _broken(kind: str) -> tuple[dict[str, torch.Tensor], str]:
    """A state dict that fits but for one key, and that key's name."""
    state = _other_state()
    names = list(state)
    last = names[-1]
    if kind == "missing":
        del state[names[0]]
        return state, names[0]
    if kind == "extra":
        state["model.layers.99.mlp.up_proj.weight"] = torch.zeros(2, 2)
        return state, "model.layers.99.mlp.up_proj.weight"
    if kind == "shape":
        state[last] = state[last][:1].clone()
    elif kind == "nan":
        state[last] = state[last].clone()
        state[last].view(-1)[-1] = float("nan")
    elif kind == "inf":
        state[last].view(-1)[0] = float("-inf")
    elif kind == "dtype":
        state[last] = state[last].to(torch.float64)
    return state, last


KINDS = ["missing", "extra", "shape", "nan", "inf", "dtype"]


@pytest.mark.parametrize("kind", KINDS)
def test_the_memory_route_refuses_an_unfit_state_dict_whole(served: tuple[Server, TestClient], kind: str) -> None:
    server, client = served
    before, version = _snapshot(server.policy.model), server.weight_version
    state, key = _broken(kind)
    answer = client.post("/update_weights_from_safetensors?weight_version=77", content=save(state))
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert f"key {key!r}" in error["message"] and "the served weights stay as they were" in error["message"]
    assert error["param"] == "body"
    assert _same(server.policy.model, before) and server.weight_version == version


def test_the_memory_route_loads_a_fitting_state_dict(served: tuple[Server, TestClient]) -> None:
    server, client = served
    state = _other_state()
    answer = client.post("/update_weights_from_safetensors?weight_version=12", content=save(state))
    assert answer.status_code == 200 and answer.json()["weight_version"] == 12
    assert _same(server.policy.model, state)


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (("rllm.transformers.num_layers=3",), "is not one of the model's"),  # one layer more
        (("rllm.transformers.hidden_size=32",), "of another shape"),
        (("rllm.transformers.dtype=bfloat16",), "torch.bfloat16, the model's is torch.float32"),
    ],
)
def test_the_disk_route_refuses_a_directory_whose_model_does_not_fit(
    served: tuple[Server, TestClient], tmp_path: Path, extra: tuple[str, ...], named: str
) -> None:
    server, client = served
    _policy(*extra).model.save_pretrained(tmp_path)
    before, version = _snapshot(server.policy.model), server.weight_version
    answer = client.post("/update_weights_from_disk", content=json.dumps({"model_path": str(tmp_path)}))
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert named in error["message"] and error["param"] == "model_path"
    assert _same(server.policy.model, before) and server.weight_version == version


def test_the_disk_route_refuses_a_directory_with_a_nan_weight(
    served: tuple[Server, TestClient], tmp_path: Path
) -> None:
    server, client = served
    other = _policy("rllm.transformers.seed=5").model
    name, parameter = next(iter(other.named_parameters()))
    with torch.no_grad():
        parameter.view(-1)[3] = float("nan")
    other.save_pretrained(tmp_path)
    before = _snapshot(server.policy.model)
    answer = client.post("/update_weights_from_disk", content=json.dumps({"model_path": str(tmp_path)}))
    assert answer.status_code == 400
    assert f"key {name!r} holds NaN or infinite values" in answer.json()["error"]["message"]
    assert _same(server.policy.model, before)


def test_a_pickled_model_path_is_a_400_naming_the_field(served: tuple[Server, TestClient], tmp_path: Path) -> None:
    server, client = served
    _policy().model.config.save_pretrained(tmp_path)
    torch.save({"weights": object()}, tmp_path / "pytorch_model.bin")  # torch refuses to unpickle it
    before = _snapshot(server.policy.model)
    answer = client.post("/update_weights_from_disk", content=json.dumps({"model_path": str(tmp_path)}))
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["param"] == "model_path" and "no model could be loaded there" in error["message"]
    assert _same(server.policy.model, before)


@pytest.mark.parametrize("kind", KINDS)
def test_weights_problem_names_the_key(kind: str) -> None:
    state, key = _broken(kind)
    problem = weights_problem(_policy().model, state)
    assert problem is not None and f"key {key!r}" in problem


def test_load_checked_leaves_the_model_untouched_when_it_refuses() -> None:
    model = _policy().model
    before = _snapshot(model)
    state, _ = _broken("shape")
    with pytest.raises(ValueError, match="of another shape"):
        load_checked(model, state, ValueError)
    assert _same(model, before)  # load_state_dict alone would have copied every fitting tensor first
    load_checked(model, _other_state(), ValueError)
    assert not _same(model, before)


def test_a_checkpoint_of_another_model_is_refused_before_it_is_restored(tmp_path: Path) -> None:
    bigger = _policy("rllm.transformers.num_layers=3")
    optimizer = torch.optim.AdamW(bigger.model.parameters())
    save_training_state(tmp_path, bigger.model, bigger.tokenizer, optimizer.state_dict(), {}, {})
    model = _policy().model
    before = _snapshot(model)
    with pytest.raises(CheckpointError, match=r"is not one of the model's.*resume with the same model settings"):
        load_training_state(tmp_path, model, torch.optim.AdamW(model.parameters()), {})
    assert _same(model, before)


def _completion(client: TestClient, **fields: Any) -> Any:
    return client.post("/v1/completions", content=json.dumps({"model": "tiny", "prompt": "Hi", **fields}))


@pytest.mark.parametrize(
    ("fields", "param", "said"),
    [
        ({"temperature": float("nan")}, "temperature", "temperature must be a number >= 0.01 and <= 2; got nan"),
        ({"temperature": 1e-310}, "temperature", "got 1e-310"),  # subnormal
        ({"temperature": 1e-46}, "temperature", "got 1e-46"),  # float32 rounds it to 0
        ({"temperature": float("inf")}, "temperature", "got inf"),
        ({"temperature": True}, "temperature", "got true (bool)"),
        ({"top_p": float("nan")}, "top_p", "top_p must be a number >= 1e-06 and <= 1; got nan"),
        ({"top_p": 1e-46}, "top_p", "got 1e-46"),
        ({"top_p": 0}, "top_p", "got 0"),
        ({"seed": 2**64}, "seed", f"seed must be between 0 and {2**64 - 1}, got {2**64}"),
        ({"seed": float("nan")}, "seed", "seed must be an integer"),
    ],
)
def test_a_sampling_field_out_of_range_is_a_400_naming_it(
    served: tuple[Server, TestClient], fields: dict[str, Any], param: str, said: str
) -> None:
    answer = _completion(served[1], **fields)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["param"] == param and said in error["message"], error


def test_the_largest_seed_and_greedy_zero_are_served(served: tuple[Server, TestClient]) -> None:
    for fields in ({"seed": 2**64 - 1}, {"temperature": 0}, {"temperature": 0.01, "top_p": 1e-6}):
        answer = _completion(served[1], max_tokens=2, **fields)
        assert answer.status_code == 200, answer.text


def test_a_body_nested_100000_deep_is_a_400(served: tuple[Server, TestClient]) -> None:
    answer = served[1].post("/v1/completions", content=b"[" * 100_000 + b"]" * 100_000)
    assert answer.status_code == 400 and "nested too deeply" in answer.json()["error"]["message"]


def test_a_chat_prompt_over_the_context_with_null_max_tokens_is_a_400(served: tuple[Server, TestClient]) -> None:
    server, client = served
    long = " ".join(["word"] * server.context_limit)
    body = {"model": "tiny", "messages": [{"role": "user", "content": long}], "max_tokens": None}
    answer = client.post("/v1/chat/completions", content=json.dumps(body))
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["param"] == "messages" and error["code"] == "context_length_exceeded"
    assert f"maximum context length is {server.context_limit} tokens" in error["message"]


def test_an_unexpected_failure_is_a_json_500(
    served: tuple[Server, TestClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, client = served

    def broken(body: dict[str, Any]) -> dict[str, Any]:
        raise KeyError("boom")

    monkeypatch.setattr(server, "tokenize", broken)
    answer = client.post("/tokenize", content=json.dumps({"model": "tiny", "prompt": "x"}))
    assert answer.status_code == 500
    assert answer.json()["error"]["message"] == "rllm serve failed on this request (KeyError: 'boom')."
