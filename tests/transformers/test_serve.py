"""``rllm serve`` as a user runs it: a subprocess on 127.0.0.1, driven by the stock ``openai`` client.

The returned token ids and log-probs are checked against a plain forward pass of the same
weights (the tiny model is built from its seed, so this process builds the same one), not
against the server's own sampler.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from extras import skip_module_without
from serving import TINY_TEXT, get_json, post, running

skip_module_without(
    "torch", "transformers", "safetensors", "fastapi", "uvicorn", "openai", install="pip install 'rllm[serve,test]'"
)

import openai
import torch

from rllm.config import load_config
from rllm.errors import ConfigError
from rllm_transformers.model import load_policy

MODEL = TINY_TEXT


_get = get_json


def _post(url: str, data: bytes) -> tuple[int, dict[str, Any]]:
    return post(url, data)


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """The server's root URL; the process is stopped whatever the tests did."""
    with running(*MODEL) as root:
        yield root


@pytest.fixture(scope="module")
def policy() -> Any:
    """The same weights as the server's: the tiny model built from the same keys and seed."""
    return load_policy(load_config(overrides=list(MODEL)).rllm.transformers)


def _client(root: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{root}/v1", api_key="unused", timeout=30, max_retries=0)


def _forward_log_probs(model: Any, prompt: list[int], completion: list[int]) -> list[float]:
    """log p(completion token | everything before it), from one forward pass over the whole sequence."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + completion])).logits[0].float()
    log_p = torch.log_softmax(logits[len(prompt) - 1 : -1], dim=-1)
    return log_p.gather(-1, torch.tensor(completion)[:, None]).squeeze(-1).tolist()


def test_completion_ids_and_log_probs_equal_a_forward_pass(server: str, policy: Any) -> None:
    answer = _client(server).completions.create(
        model="tiny", prompt="Hello", max_tokens=12, logprobs=0, seed=3, extra_body={"return_token_ids": True}
    )
    choice = answer.choices[0]
    prompt = policy.tokenizer.encode("Hello", add_special_tokens=False)
    assert choice.prompt_token_ids == prompt
    assert 1 <= len(choice.token_ids) <= 12
    assert choice.text == policy.tokenizer.decode(choice.token_ids, skip_special_tokens=True)
    expected = _forward_log_probs(policy.model, prompt, choice.token_ids)
    assert choice.logprobs.token_logprobs == pytest.approx(expected, abs=1e-5)
    assert answer.usage.completion_tokens == len(choice.token_ids)

    by_ids = _client(server).completions.create(
        model="tiny", prompt=prompt, max_tokens=12, logprobs=0, seed=3, extra_body={"return_token_ids": True}
    )
    assert by_ids.choices[0].token_ids == choice.token_ids  # token-id prompt, same seed: the same sample


def test_chat_ids_and_log_probs_equal_a_forward_pass(server: str, policy: Any) -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}]
    answer = _client(server).chat.completions.create(
        model="tiny", messages=messages, max_tokens=10, logprobs=True, n=3, extra_body={"return_token_ids": True}
    )
    rendered = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n"
    prompt = policy.tokenizer.encode(rendered, add_special_tokens=False)  # ChatML, rendered by hand
    assert answer.prompt_token_ids == prompt
    assert prompt[-11] == policy.tokenizer.convert_tokens_to_ids("<|im_start|>")
    assert len(answer.choices) == 3
    for choice in answer.choices:
        expected = _forward_log_probs(policy.model, prompt, choice.token_ids)
        assert [entry.logprob for entry in choice.logprobs.content] == pytest.approx(expected, abs=1e-5)
        assert choice.message.content == policy.tokenizer.decode(choice.token_ids, skip_special_tokens=True)


def test_greedy_and_stop(server: str, policy: Any) -> None:
    client = _client(server)
    prompt = policy.tokenizer.encode("abc", add_special_tokens=False)
    greedy = client.completions.create(
        model="tiny", prompt=prompt, max_tokens=6, temperature=0, extra_body={"return_token_ids": True}
    )
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(6):  # argmax continuation from full forward passes
            ids.append(int(policy.model(input_ids=torch.tensor([ids])).logits[0, -1].argmax()))
    assert greedy.choices[0].token_ids == ids[len(prompt) : len(prompt) + len(greedy.choices[0].token_ids)]

    sampled = client.completions.create(
        model="tiny", prompt=prompt, max_tokens=30, seed=5, extra_body={"return_token_ids": True}
    )
    text = sampled.choices[0].text
    stop = text[3]  # a character the seeded sample is known to produce at position 3 (or earlier)
    cut = client.completions.create(
        model="tiny", prompt=prompt, max_tokens=30, seed=5, stop=[stop], extra_body={"return_token_ids": True}
    )
    first = text.index(stop)
    assert cut.choices[0].text == text[:first]
    assert cut.choices[0].finish_reason == "stop"
    assert cut.choices[0].token_ids == sampled.choices[0].token_ids[: first + 1]


def test_64_concurrent_requests_are_batched(server: str) -> None:
    before = _get(f"{server}/health")

    async def run() -> list[Any]:
        client = openai.AsyncOpenAI(base_url=f"{server}/v1", api_key="unused", timeout=30, max_retries=0)
        calls = [
            client.completions.create(model="tiny", prompt=f"q{i}", max_tokens=8, extra_body={"return_token_ids": True})
            for i in range(64)
        ]
        try:
            return await asyncio.wait_for(asyncio.gather(*calls), timeout=45)
        finally:
            await client.close()

    answers = asyncio.run(run())
    assert len(answers) == 64 and all(1 <= len(a.choices[0].token_ids) <= 8 for a in answers)
    after = _get(f"{server}/health")
    assert after["requests"] - before["requests"] == 64
    assert after["generate_calls"] - before["generate_calls"] <= 16  # batched, not one generate per request


def test_bad_requests_are_4xx_with_a_message(server: str) -> None:
    client = _client(server)
    with pytest.raises(openai.BadRequestError, match="maximum context length is 256 tokens"):
        client.completions.create(model="tiny", prompt="hi", max_tokens=1000)
    with pytest.raises(openai.NotFoundError, match="serves 'tiny'"):
        client.chat.completions.create(model="gpt-4", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(openai.BadRequestError, match="role robot is not one of"):
        client.chat.completions.create(model="tiny", messages=[{"role": "robot", "content": "hi"}])
    status, body = _post(f"{server}/v1/completions", b"{not json")
    assert status == 400 and "not valid JSON" in body["error"]["message"]
    assert body["error"]["type"] == "invalid_request_error"
    for extra, named in (({"stream": True}, "does not stream"), ({"best_of": 2}, "does not support best_of")):
        status, body = _post(
            f"{server}/v1/completions", json.dumps({"model": "tiny", "prompt": "hi", **extra}).encode()
        )
        assert status == 400 and named in body["error"]["message"] and body["error"]["param"] == next(iter(extra))
    status, body = _post(f"{server}/update_weights_from_disk", json.dumps({"model_path": "/no/such/dir"}).encode())
    assert status == 400 and "no such directory" in body["error"]["message"]


def test_update_weights_from_disk_changes_outputs_and_version(server: str, policy: Any, tmp_path: Path) -> None:
    new = load_policy(load_config(overrides=[*MODEL, "rllm.transformers.seed=7"]).rllm.transformers)
    new.model.save_pretrained(tmp_path / "model")
    new.tokenizer.save_pretrained(tmp_path / "model")
    version = _get(f"{server}/health")["weight_version"]
    for extra, named in (({"stream": True}, "does not stream"), ({"best_of": 2}, "does not support best_of")):
        status, body = _post(
            f"{server}/v1/completions", json.dumps({"model": "tiny", "prompt": "hi", **extra}).encode()
        )
        assert status == 400 and named in body["error"]["message"] and body["error"]["param"] == next(iter(extra))
    status, body = _post(f"{server}/update_weights_from_disk", json.dumps({"model_path": str(tmp_path)}).encode())
    assert status == 200 and body["success"] and body["weight_version"] == version + 1

    answer = _client(server).completions.create(
        model="tiny", prompt="Hello", max_tokens=8, logprobs=0, extra_body={"return_token_ids": True}
    )
    choice = answer.choices[0]
    assert answer.weight_version == version + 1
    prompt = choice.prompt_token_ids
    assert choice.logprobs.token_logprobs == pytest.approx(
        _forward_log_probs(new.model, prompt, choice.token_ids), abs=1e-5
    )
    old = _forward_log_probs(policy.model, prompt, choice.token_ids)
    assert max(abs(a - b) for a, b in zip(old, choice.logprobs.token_logprobs, strict=True)) > 1e-3


@pytest.mark.parametrize(
    ("words", "message"),
    [
        (["--port", "0"], "rllm serve: error: --port 0 is not a TCP port; give 1-65535."),
        (["rllm.transformers.modle=tiny"], "Did you mean 'rllm.transformers.model'?"),
        (["--checkpoint-dir", "x"], "rllm serve: error: --checkpoint-dir applies to --tinker only"),
        (["--tinker-snapshots", "4"], "rllm serve: error: --tinker-snapshots applies to --tinker only"),
        (["--tinker", "--tinker-snapshots", "0"], "rllm serve: error: --tinker-snapshots 0: keep at least 1"),
        (["--tinker", "--port", "0"], "rllm serve: error: --port 0 is not a TCP port; give 1-65535."),
    ],
)
def test_a_bad_command_line_is_one_line(capsys: pytest.CaptureFixture[str], words: list[str], message: str) -> None:
    from rllm.cli.main import main

    assert main(["serve", *words]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_the_missing_extra_is_one_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import importlib

    from rllm.cli.main import main

    monkeypatch.setitem(sys.modules, "fastapi", None)
    monkeypatch.delitem(sys.modules, "rllm_transformers.serve", raising=False)
    with pytest.raises(ConfigError, match=r"rllm serve needs fastapi: pip install 'rllm\[serve\]'"):
        importlib.import_module("rllm_transformers.serve")
    assert main(["serve", *MODEL, "--port", "1"]) == 2  # the command line says it before loading any model
    assert capsys.readouterr().err.strip() == "rllm serve: error: rllm serve needs fastapi: pip install 'rllm[serve]'."


def test_without_torch_rllm_serve_names_the_serve_extra_not_the_backends(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from rllm.cli.main import main

    monkeypatch.setitem(sys.modules, "torch", None)
    assert main(["serve", *MODEL, "--port", "1"]) == 2
    assert capsys.readouterr().err.strip() == "rllm serve: error: rllm serve needs torch: pip install 'rllm[serve]'."


def test_update_weights_from_safetensors_loads_the_body(server: str, policy: Any) -> None:
    from safetensors.torch import save

    new = load_policy(load_config(overrides=[*MODEL, "rllm.transformers.seed=11"]).rllm.transformers)
    state = {name: tensor.clone() for name, tensor in new.model.state_dict().items()}  # untie the shared embedding
    status, body = _post_bytes(f"{server}/update_weights_from_safetensors?weight_version=41", save(state))
    assert (status, body["success"], body["weight_version"]) == (200, True, 41)
    answer = _client(server).completions.create(
        model="tiny", prompt="Hello", max_tokens=6, logprobs=0, extra_body={"return_token_ids": True}
    )
    choice = answer.choices[0]
    assert answer.weight_version == 41
    assert choice.logprobs.token_logprobs == pytest.approx(
        _forward_log_probs(new.model, choice.prompt_token_ids, choice.token_ids), abs=1e-5
    )
    status, body = _post_bytes(f"{server}/update_weights_from_safetensors", b"not safetensors")
    assert status == 400 and "not a safetensors state dict" in body["error"]["message"]
    assert _get(f"{server}/health")["weight_version"] == 41  # the refused update changed nothing
    wrong = {name: tensor[:1].clone() for name, tensor in new.model.state_dict().items()}
    status, body = _post_bytes(f"{server}/update_weights_from_safetensors", save(wrong))
    assert status == 400 and "another shape" in body["error"]["message"]


def test_tokenize_and_detokenize_speak_vllm(server: str, policy: Any) -> None:
    tokenizer = policy.tokenizer
    status, body = _post(f"{server}/tokenize", json.dumps({"model": "tiny", "prompt": "12+3"}).encode())
    assert status == 200 and body["tokens"] == list(tokenizer.encode("12+3")) and body["count"] == len(body["tokens"])
    assert body["max_model_len"] == _get(f"{server}/v1/models")["data"][0]["max_model_len"]
    ids = [tokenizer.eos_token_id, len(tokenizer) - 1, 40]
    status, body = _post(f"{server}/detokenize", json.dumps({"model": "tiny", "tokens": ids}).encode())
    assert status == 200 and body["prompt"] == tokenizer.decode(ids, skip_special_tokens=False)
    status, body = _post(f"{server}/detokenize", json.dumps({"model": "tiny", "tokens": [len(tokenizer)]}).encode())
    assert status == 400 and "outside the vocabulary" in body["error"]["message"]


def _post_bytes(url: str, data: bytes) -> tuple[int, dict[str, Any]]:
    return post(url, data, "application/octet-stream")


def test_a_port_in_use_is_one_line(server: str) -> None:
    port = server.rsplit(":", 1)[1]
    done = subprocess.run(
        [sys.executable, "-m", "rllm.cli.main", "serve", *MODEL, "--port", port],
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert f"--host 127.0.0.1 --port {port}: the address is already in use" in lines[0]


def test_connections_to_the_listening_socket_send_without_delay() -> None:
    """Both servers' (``rllm serve`` and ``--tinker``) accepted connections have TCP_NODELAY: asyncio sets it only on
    a TCP socket, and without it an answer written in two parts waited for the client's delayed ACK (~40 ms)."""
    import socket

    from rllm_transformers.serve import listen

    async def accepted_nodelay() -> int:
        sock = listen("127.0.0.1", 0)
        seen: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            seen.set_result(writer.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        server = await asyncio.start_server(on_connect, sock=sock)
        _, writer = await asyncio.open_connection(*sock.getsockname()[:2])
        try:
            return await asyncio.wait_for(seen, 10)
        finally:
            writer.close()
            server.close()

    assert asyncio.run(accepted_nodelay()) != 0


@pytest.mark.parametrize("tinker", [False, True], ids=["openai", "tinker"])
def test_every_server_runs_on_the_threads_the_config_names(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, tinker: bool
) -> None:
    """``rllm.transformers.num_threads`` applies to ``rllm serve`` and ``rllm serve --tinker`` as to the trainer:
    the server runs until interrupted, so uvicorn's loop is stood in for and the threads read where it would start."""
    import uvicorn

    from rllm_transformers.serve import serve
    from rllm_transformers.tinker_server.app import serve_tinker

    seen: list[int] = []
    monkeypatch.setattr(uvicorn.Server, "run", lambda self, sockets: seen.append(torch.get_num_threads()))
    before = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        config = load_config(overrides=[*TINY_TEXT, "rllm.transformers.num_threads=1"])
        if tinker:
            serve_tinker(config, "127.0.0.1", 0, None, str(tmp_path))
        else:
            serve(config, "127.0.0.1", 0)
    finally:
        torch.set_num_threads(before)
    assert seen == [1]


@pytest.mark.parametrize("batched", [True, False], ids=["batched", "reproducible"])
def test_reproducible_samples_each_request_alone_with_the_numbers_it_gets_alone(policy: Any, batched: bool) -> None:
    """``rllm serve --reproducible``: concurrent seeded requests make one generate call each, so their log-probs are
    exactly (not only to rounding) those each gets when sent alone; batched (the default) they share one call."""
    from rllm.engine.openai_api import Params
    from rllm_transformers.serve import Server

    def params(prompt: list[int], seed: int, n: int) -> Params:
        return Params(prompt, 6, 1.0, 1.0, 0, False, n, seed)

    asked = [params([1, 2, 11], 5, 2), params([7, 3, 4, 9, 11], 6, 1), params([5, 11], 7, 3)]
    server = Server(policy, "tiny", 0, batched=batched)

    async def together() -> list[Any]:
        return await asyncio.gather(*(server.generate(p) for p in asked))

    answers = asyncio.run(together())
    assert server.generate_calls == (1 if batched else len(asked))
    alone = [asyncio.run(server.generate(p)) for p in asked]
    for both, single in zip(answers, alone, strict=True):
        assert [g.response_ids for g in both] == [g.response_ids for g in single]
        if not batched:
            assert [g.logprobs for g in both] == [g.logprobs for g in single]


@pytest.mark.parametrize("tinker", [False, True], ids=["openai", "tinker"])
def test_the_command_lines_reproducible_reaches_both_servers(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, tinker: bool
) -> None:
    """``rllm serve [--tinker] --reproducible``: the server that starts samples each request alone (uvicorn's loop
    stood in for, the sampler's switch read where it would start)."""
    import socket

    import uvicorn

    from rllm.cli.main import main
    from rllm_transformers import serve as openai_server
    from rllm_transformers.tinker_server import app as tinker_app

    switches: list[bool] = []
    monkeypatch.setattr(uvicorn.Server, "run", lambda self, sockets: None)
    if tinker:
        service = tinker_app.TinkerService
        monkeypatch.setattr(
            tinker_app, "TinkerService", lambda *a, **k: switches.append(k["batched"]) or service(*a, **k)
        )
    else:
        server = openai_server.Server
        monkeypatch.setattr(openai_server, "Server", lambda *a, **k: switches.append(k["batched"]) or server(*a, **k))
    for reproducible in (False, True):
        with socket.socket() as free:
            free.bind(("127.0.0.1", 0))
            port = free.getsockname()[1]
        words = ["serve", *TINY_TEXT, "--port", str(port)]
        words += ["--tinker", "--checkpoint-dir", str(tmp_path)] if tinker else []
        assert main(words + (["--reproducible"] if reproducible else [])) == 0
    assert switches == [True, False]
