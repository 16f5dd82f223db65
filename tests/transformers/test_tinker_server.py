"""``rllm serve --tinker`` driven by the official ``tinker`` SDK (its own client, no mock), on 127.0.0.1.

The served model is a tiny Qwen2 built from a config and saved to a temporary directory; every
expected number (log-probs, Tinker's summed losses, an AdamW step) is computed here with plain
torch from that directory, following Tinker's documented formulas, not by the server's code.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from extras import skip_module_without
from serving import TINY_TEXT, post_json, running

skip_module_without(
    "torch", "transformers", "safetensors", "fastapi", "uvicorn", "tinker", install="pip install 'rllm[tinker,test]'"
)

import numpy as np
import tinker
import torch
from tinker import types
from tinker_sequence import ADVANTAGES, SAMPLED, TOKENS, WEIGHTS, datum

from rllm.config import load_config
from rllm_transformers.model import load_policy
from rllm_transformers.tinker_server.trainer import target_log_probs

SERVED = "tiny-local"
HEALTH = "/api/v1/healthz"
SEQUENCE = Path(__file__).with_name("tinker_sequence.py")
OLD_SDK = "RLLM_TINKER_OLD_PYTHON"
"""A Python whose ``tinker`` is an older SDK (tested: 0.18.2, which sends JSON), for the opt-in old-version test."""


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny text model, saved: what the server serves and what this test computes with."""
    policy = load_policy(load_config(overrides=list(TINY_TEXT)).rllm.transformers)
    directory = tmp_path_factory.mktemp("tiny-model")
    policy.model.save_pretrained(directory)
    policy.tokenizer.save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tinker-checkpoints")


def _words(model_dir: Path, checkpoints: Path) -> tuple[str, ...]:
    model = f"rllm.transformers.model={model_dir}"
    return (
        "--tinker",
        model,
        "rllm.transformers.device=cpu",
        "--served-model-name",
        SERVED,
        "--checkpoint-dir",
        str(checkpoints),
    )


@pytest.fixture(scope="module")
def server(model_dir: Path, checkpoints: Path) -> Iterator[str]:
    with running(*_words(model_dir, checkpoints), health=HEALTH) as root:
        yield root


@contextmanager
def service(root: str) -> Iterator[tinker.ServiceClient]:
    """A ServiceClient closed after the block, which frees the server's training model for the next one."""
    client = tinker.ServiceClient(base_url=root, api_key="tml-rllm-test")
    try:
        yield client
    finally:
        client.close("success").result()


def _model(directory: Path) -> Any:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(directory)).float()


def _log_probs(model: Any, tokens: list[int], targets: list[int]) -> torch.Tensor:
    logits = model(input_ids=torch.tensor([tokens])).logits[0].float()
    return torch.log_softmax(logits, dim=-1).gather(-1, torch.tensor(targets)[:, None]).squeeze(-1)


def _expected(model: Any, loss: str, config: dict[str, float] | None = None) -> torch.Tensor:
    """Tinker's documented loss for :func:`datum`'s datum, summed over its tokens."""
    lp = _log_probs(model, TOKENS[:-1], TOKENS[1:])
    if loss == "cross_entropy":
        return -(torch.tensor(WEIGHTS) * lp).sum().detach()
    ratio, adv = torch.exp(lp - torch.tensor(SAMPLED)), torch.tensor(ADVANTAGES)
    if loss == "importance_sampling":
        return -(ratio * adv).sum().detach()
    config = config or {}
    low, high = config.get("clip_low_threshold", 0.8), config.get("clip_high_threshold", 1.2)
    clipped = torch.clamp(ratio, low, high)
    if loss == "ppo":
        return -torch.minimum(ratio * adv, clipped * adv).sum().detach()
    if loss == "cispo":
        return -(clipped.detach() * adv * lp).sum().detach()
    assert loss == "dro"
    sampled = torch.tensor(SAMPLED)
    return -(adv * lp - 0.5 * config["beta"] * (lp - sampled) ** 2).sum().detach()


def _sampler_dir(checkpoints: Path, model_id: str, name: str) -> Path:
    return checkpoints / model_id.replace(":", "_") / "sampler_weights" / name


@pytest.mark.parametrize(
    ("loss", "config"),
    [
        ("cross_entropy", None),
        ("importance_sampling", None),
        ("ppo", None),
        ("ppo", {"clip_low_threshold": 0.9, "clip_high_threshold": 1.05}),
        ("cispo", None),
        ("dro", {"beta": 0.5}),
    ],
)
def test_losses_are_tinkers_sums(server: str, model_dir: Path, loss: str, config: dict[str, float] | None) -> None:
    model = _model(model_dir)
    with service(server) as client:
        training = client.create_lora_training_client(base_model=SERVED, rank=8).result()
        out = training.forward_backward([datum(loss)], loss, config).result()
    expected = _expected(model, loss, config)
    assert out.metrics["loss:sum"] == pytest.approx(float(expected), rel=1e-5, abs=1e-5)
    served = np.asarray(out.loss_fn_outputs[0]["logprobs"].tolist())
    own = _log_probs(model, TOKENS[:-1], TOKENS[1:]).detach().numpy()
    assert np.abs(served - own).max() <= 1e-5


def test_gradients_add_up_until_optim_step(server: str, model_dir: Path) -> None:
    """Two forward_backward calls on one datum, then optim_step: the gradient it applies is twice one call's."""
    with service(server) as client:
        training = client.create_lora_training_client(base_model=SERVED, rank=8).result()
        for _ in range(2):
            training.forward_backward([datum("importance_sampling")], "importance_sampling").result()
        metrics = training.optim_step(types.AdamParams(learning_rate=1e-3)).result().metrics
    model = _model(model_dir)
    lp = _log_probs(model, TOKENS[:-1], TOKENS[1:])
    (-(torch.exp(lp - torch.tensor(SAMPLED)) * torch.tensor(ADVANTAGES)).sum()).backward()
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in model.parameters()]))
    assert metrics["grad_norm:mean"] == pytest.approx(2 * float(norm), rel=1e-4)


def test_ppo_clips_some_tokens_in_the_test_data(model_dir: Path) -> None:
    """The PPO cases above would not tell clipping from no clipping unless some ratios fall outside the range."""
    lp = _log_probs(_model(model_dir), TOKENS[:-1], TOKENS[1:])
    ratio = torch.exp(lp - torch.tensor(SAMPLED))
    outside = ((ratio < 0.8) | (ratio > 1.2)) & (torch.tensor(ADVANTAGES) != 0)
    assert bool(outside.any()) and not bool(outside.all())


def test_optim_step_is_one_adamw_step(server: str, model_dir: Path, checkpoints: Path) -> None:
    adam = types.AdamParams(learning_rate=1e-2, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.01)
    with service(server) as client:
        training = client.create_lora_training_client(base_model=SERVED, rank=8).result()
        training.forward_backward([datum("cross_entropy")], "cross_entropy").result()
        training.optim_step(adam).result()
        saved = training.save_weights_for_sampler("after-adamw").result()
        model_id = training.model_id
    assert saved.path == f"tinker://{model_id}/sampler_weights/after-adamw"
    model = _model(model_dir)
    # the gradient through the server's own chunked scoring (test_real_vocabulary checks it against a whole
    # log-softmax's): AdamW's first step at eps 1e-8 turns the rounding of a gradient near eps into up to 7e-6 of a
    # weight, as much as a missing weight decay would change one (1e-4 of it)
    lp = target_log_probs(model, [TOKENS[:-1]], [TOKENS[1:]], pad=0)[0]
    (-(torch.tensor(WEIGHTS) * lp).sum()).backward()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.01)
    optimizer.step()
    served = _model(_sampler_dir(checkpoints, model_id, "after-adamw")).state_dict()
    base = _model(model_dir).state_dict()
    for name, value in model.state_dict().items():
        assert torch.allclose(served[name], value, atol=2e-6), name
    assert max(float((served[name] - base[name]).abs().max()) for name in base) > 5e-3


def test_samples_after_a_step_have_the_forward_log_probs(server: str, model_dir: Path, checkpoints: Path) -> None:
    """The sampler holds the saved weights (not the base ones): its log-probs are the server's ``forward``'s and
    those of this test's own forward pass over the saved weights."""
    prompt = TOKENS[:4]
    with service(server) as client:
        training = client.create_lora_training_client(base_model=SERVED, rank=8).result()
        training.forward_backward([datum("cross_entropy")], "cross_entropy").result()
        training.optim_step(types.AdamParams(learning_rate=5e-2)).result()
        sampler = training.save_weights_and_get_sampling_client().result()
        params = types.SamplingParams(max_tokens=6, seed=11)
        answer = sampler.sample(types.ModelInput.from_ints(prompt), 3, params).result()
        checks = []
        for sequence in answer.sequences:
            whole = prompt + list(sequence.tokens)
            check = types.Datum(
                model_input=types.ModelInput.from_ints(whole[:-1]),
                loss_fn_inputs={"target_tokens": np.array(whole[1:], dtype=np.int64)},
            )
            out = training.forward([check], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].tolist()
            checks.append((whole, np.asarray(sequence.logprobs), np.asarray(out[len(prompt) - 1 :])))
        saved = training.save_weights_for_sampler("same-weights").result()
    trained = _model(_sampler_dir(checkpoints, saved.path.split("/")[2], "same-weights"))
    base = _model(model_dir)
    assert (
        len({len(s.sequence_id) for s in answer.sequences}) == 1 and len({s.sequence_id for s in answer.sequences}) == 3
    )
    for whole, sampled, forward in checks:
        assert np.abs(sampled - forward).max() <= 1e-5
        own = _log_probs(trained, whole[:-1], whole[1:]).detach().numpy()[len(prompt) - 1 :]
        assert np.abs(sampled - own).max() <= 1e-5
    whole = checks[0][0]
    old = _log_probs(base, whole[:-1], whole[1:]).detach().numpy()[len(prompt) - 1 :]
    assert np.abs(checks[0][1] - old).max() > 1e-3


def test_sampling_clients_from_a_path_and_from_the_base_model(server: str, model_dir: Path, checkpoints: Path) -> None:
    """``create_sampling_client`` by saved path and by base model (the create_sampling_session route): prompt
    log-probs, greedy decoding and stop tokens, against this test's own forward passes."""
    prompt = TOKENS[:5]
    with service(server) as client:
        training = client.create_lora_training_client(base_model=SERVED, rank=8).result()
        training.forward_backward([datum("cross_entropy")], "cross_entropy").result()
        training.optim_step(types.AdamParams(learning_rate=5e-2)).result()
        path = training.save_weights_for_sampler("for-path").result().path
        by_path = client.create_sampling_client(model_path=path).result()
        by_base = client.create_sampling_client(base_model=SERVED).result()
        greedy = types.SamplingParams(max_tokens=5, temperature=0.0)
        trained_answer = by_path.sample(types.ModelInput.from_ints(prompt), 1, greedy, include_prompt_logprobs=True)
        base_answer = by_base.sample(types.ModelInput.from_ints(prompt), 1, greedy, include_prompt_logprobs=True)
        trained_answer, base_answer = trained_answer.result(), base_answer.result()
        first = trained_answer.sequences[0].tokens[0]
        stop = types.SamplingParams(max_tokens=5, temperature=0.0, stop=[first])
        stopped = by_path.sample(types.ModelInput.from_ints(prompt), 1, stop).result().sequences[0]
    for directory, answer in (
        (_sampler_dir(checkpoints, path.split("/")[2], "for-path"), trained_answer),
        (model_dir, base_answer),
    ):
        model = _model(directory)
        assert answer.prompt_logprobs[0] is None
        own = _log_probs(model, prompt[:-1], prompt[1:]).tolist()
        assert np.abs(np.asarray(answer.prompt_logprobs[1:]) - np.asarray(own)).max() <= 1e-5
        tokens = list(prompt)
        with torch.no_grad():
            for _ in range(5):
                tokens.append(int(model(input_ids=torch.tensor([tokens])).logits[0, -1].argmax()))
        assert answer.sequences[0].tokens == tokens[len(prompt) :]
    assert (stopped.tokens, stopped.stop_reason) == ([first], "stop")


def test_concurrent_samples_equal_those_sent_alone(server: str) -> None:
    """The SDK's concurrent sample calls, which the server samples in batches: each request's tokens with its seed
    are those it gets when sent alone (the batching itself is counted in test_tinker_server_queue.py)."""
    prompts = [TOKENS[:3], TOKENS[:5], TOKENS[2:4], TOKENS[:3], TOKENS[1:7]]
    with service(server) as client:
        sampler = client.create_sampling_client(base_model=SERVED).result()

        def send(i: int) -> Any:
            params = types.SamplingParams(max_tokens=4 + i, seed=100 + i)
            return sampler.sample(types.ModelInput.from_ints(prompts[i]), 1 + i % 2, params)

        futures = [send(i) for i in range(len(prompts))]
        together = [future.result() for future in futures]
        alone = [send(i).result() for i in range(len(prompts))]
    for batched, single in zip(together, alone, strict=True):
        assert len(batched.sequences) == len(single.sequences)
        for one, other in zip(batched.sequences, single.sequences, strict=True):
            assert list(one.tokens) == list(other.tokens)
            assert np.abs(np.asarray(one.logprobs) - np.asarray(other.logprobs)).max() <= 1e-5


@pytest.mark.slow
def test_sampled_log_probs_equal_the_servers_forward(server: str, model_dir: Path) -> None:
    """After a step (so the sampler holds the saved weights, not the base ones): this SDK through the script."""
    result = _sequence(sys.executable, server)
    assert result["version"] == tinker.__version__
    _check_sequence(result, _model(model_dir))


def _sequence(python: str, root: str) -> dict[str, Any]:
    done = subprocess.run(
        [python, str(SEQUENCE), root, SERVED], capture_output=True, text=True, timeout=300, env=os.environ.copy()
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _check_sequence(result: dict[str, Any], model: Any) -> None:
    """The script's losses (before its optimizer step) are Tinker's sums; its samples' log-probs the forward's."""
    for loss, value in result["losses"].items():
        assert value == pytest.approx(float(_expected(model, loss)), rel=1e-5, abs=1e-5), loss
    assert len(result["sequences"]) == 2
    for sequence, forward in zip(result["sequences"], result["forward"], strict=True):
        assert len(sequence["tokens"]) >= 1
        assert len(forward) == len(sequence["logprobs"])
        assert np.abs(np.asarray(forward) - np.asarray(sequence["logprobs"])).max() <= 1e-5


def test_state_saved_and_loaded_by_the_next_client(server: str, model_dir: Path) -> None:
    """One training model at a time: a second client is refused while the first holds it, served after it closes."""
    check = datum("cross_entropy")
    with service(server) as first:
        training = first.create_lora_training_client(base_model=SERVED, rank=8).result()
        training.forward_backward([check], "cross_entropy").result()
        training.optim_step(types.AdamParams(learning_rate=5e-2)).result()
        state = training.save_state("trained").result().path
        trained = training.forward([check], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].tolist()
        with service(server) as second, pytest.raises(tinker.BadRequestError) as refused:
            second.create_lora_training_client(base_model=SERVED, rank=8).result()
        assert "/api/v1/create_model: base_model: this server trains one model at a time" in str(refused.value)
        assert training.model_id in str(refused.value)
    with service(server) as third:
        restored = third.create_training_client_from_state_with_optimizer(state).result()
        again = restored.forward([check], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].tolist()
    base = _log_probs(_model(model_dir), TOKENS[:-1], TOKENS[1:]).tolist()
    assert np.abs(np.asarray(again) - np.asarray(trained)).max() <= 1e-6
    assert np.abs(np.asarray(again) - np.asarray(base)).max() > 1e-3


@pytest.mark.filterwarnings("ignore:DEPRECATED:FutureWarning")  # load_state onto a live model: load_weights' route
def test_load_state_rolls_the_model_back(server: str) -> None:
    check = datum("cross_entropy")
    with service(server) as client:
        training = client.create_lora_training_client(base_model=SERVED, rank=8).result()
        state = training.save_state("start").result().path
        before = training.forward([check], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].tolist()
        training.forward_backward([check], "cross_entropy").result()
        training.optim_step(types.AdamParams(learning_rate=5e-2)).result()
        moved = training.forward([check], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].tolist()
        training.load_state(state).result()
        back = training.forward([check], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].tolist()
    assert np.abs(np.asarray(moved) - np.asarray(before)).max() > 1e-3
    assert np.abs(np.asarray(back) - np.asarray(before)).max() <= 1e-6


def _snapshots_that_sample(root: str, made: int) -> list[bool]:
    """Which of ``made`` snapshots (``save_weights_and_get_sampling_client``, one after another) still sample; the
    others must be answered 404 with the option that keeps more."""
    alive = []
    with service(root) as client:
        training = client.create_lora_training_client(base_model=SERVED, rank=8).result()
        samplers = [training.save_weights_and_get_sampling_client().result() for _ in range(made)]
        for sampler in samplers:
            try:
                sampler.sample(types.ModelInput.from_ints(TOKENS[:3]), 1, types.SamplingParams(max_tokens=1)).result()
                alive.append(True)
            except tinker.APIStatusError as error:
                assert error.status_code == 404 and "--tinker-snapshots" in str(error), str(error)
                alive.append(False)
    return alive


def test_the_server_keeps_the_newest_three_snapshots_by_default(server: str) -> None:
    assert _snapshots_that_sample(server, 5) == [False, False, True, True, True]


def test_tinker_snapshots_keeps_as_many_as_told(model_dir: Path, tmp_path: Path) -> None:
    """An asynchronous client of lead L needs L + 1 snapshots: ``--tinker-snapshots 4`` serves lead 3."""
    words = (*_words(model_dir, tmp_path), "--tinker-snapshots", "4")
    with running(*words, health=HEALTH) as root:
        assert _snapshots_that_sample(root, 5) == [False, True, True, True, True]


def _error_of(root: str, call: Any) -> str:
    with service(root) as client:
        training = client.create_lora_training_client(base_model=SERVED, rank=8).result()
        with pytest.raises(tinker.APIStatusError) as caught:
            call(training).result()
    return str(caught.value)


def test_lengths_that_disagree_are_named(server: str) -> None:
    short = types.Datum(
        model_input=types.ModelInput.from_ints(TOKENS[:-1]),
        loss_fn_inputs={"target_tokens": np.array(TOKENS[1:-1], dtype=np.int64)},
    )
    message = _error_of(server, lambda t: t.forward_backward([short], "cross_entropy"))
    assert (
        "/api/v1/forward_backward: data[0].loss_fn_inputs.target_tokens: has 8 entries where model_input has 9 tokens"
        in message
    )


def test_an_unknown_loss_is_named(server: str) -> None:
    message = _error_of(server, lambda t: t.forward_backward([datum("ppo")], "gspo"))
    assert "/api/v1/forward_backward: loss_fn: unknown loss 'gspo'" in message
    message = _error_of(server, lambda t: t.forward_backward([datum("ppo")], "ppo", {"clip_ratio": 0.2}))
    assert "loss_fn_config: 'clip_ratio' is not a setting of ppo" in message
    message = _error_of(server, lambda t: t.forward_backward([datum("ppo")], "dro"))
    assert "/api/v1/forward_backward: loss_fn_config: dro needs loss_fn_config beta, a positive number." in message
    message = _error_of(server, lambda t: t.forward_backward([datum("cross_entropy")], "ppo"))
    assert (
        "data[0].loss_fn_inputs.weights: is not an input of ppo (it takes target_tokens, logprobs, advantages)"
        in message
    )


def test_the_json_door_checks_as_the_protobuf_one(server: str) -> None:
    """What an SDK before 0.22 sends (JSON): the same checks, the same one line, and unknown ids are 404s."""
    chunk = {"chunks": [{"tokens": TOKENS[:-1], "type": "encoded_text"}]}
    short = {"target_tokens": {"data": TOKENS[1:-1], "dtype": "int64"}}
    with service(server) as client:
        model_id = client.create_lora_training_client(base_model=SERVED, rank=8).result().model_id
        batch = {"data": [{"model_input": chunk, "loss_fn_inputs": short}], "loss_fn": "cross_entropy"}
        status, body = post_json(
            f"{server}/api/v1/forward_backward", {"model_id": model_id, "forward_backward_input": batch}
        )
        assert status == 400
        assert body["error"].startswith(
            "/api/v1/forward_backward: data[0].loss_fn_inputs.target_tokens: has 8 entries where model_input has 9"
        )
        assert (body["route"], body["field"], body["category"]) == (
            "/api/v1/forward_backward",
            "data[0].loss_fn_inputs.target_tokens",
            "user",
        )
        status, body = post_json(f"{server}/api/v1/forward", {"model_id": "nope:train:0", "forward_input": batch})
        assert status == 404
        assert (
            body["error"] == f"/api/v1/forward: model_id: unknown model 'nope:train:0'; the live one is '{model_id}'."
        )
    status, body = post_json(f"{server}/api/v1/retrieve_future", {"request_id": "req-0"})
    assert (status, body["field"]) == (404, "request_id")
    prompt = {"chunks": [{"tokens": TOKENS[:3], "type": "encoded_text"}]}
    status, body = post_json(f"{server}/api/v1/asample", {"sampling_session_id": "gone", "prompt": prompt})
    assert status == 404
    assert body["error"].startswith("/api/v1/asample: sampling_session_id: no sampling session 'gone' (")


def test_an_unknown_model_is_named(server: str) -> None:
    with service(server) as client, pytest.raises(tinker.NotFoundError) as caught:
        client.create_lora_training_client(base_model="Qwen/Qwen3-8B", rank=8).result()
    assert f"/api/v1/create_model: base_model: unknown model 'Qwen/Qwen3-8B'; this server serves '{SERVED}'" in str(
        caught.value
    )


@pytest.mark.slow
def test_older_sdks_drive_the_same_sequence(model_dir: Path, tmp_path: Path) -> None:
    """Opt-in: older SDKs (to 0.21 they send forward_backward as JSON), each in its own environment and on its own
    server (SDK 0.25 and before have no ServiceClient.close: a session holds the model until its heartbeats stop)."""
    pythons = [p for p in os.environ.get(OLD_SDK, "").split(os.pathsep) if p]
    if not pythons:
        pytest.skip(
            f"set {OLD_SDK} to Pythons (separated by {os.pathsep!r}) with older SDKs, e.g. python -m venv "
            ".venv-tinker-old && .venv-tinker-old/bin/pip install tinker==0.18.2 (see docs/tinker.md)"
        )
    model = _model(model_dir)
    for index, python in enumerate(pythons):
        with running(*_words(model_dir, tmp_path / str(index)), health=HEALTH) as root:
            result = _sequence(python, root)
        assert result["version"] != tinker.__version__, python
        _check_sequence(result, model)


def test_protobuf_zstd_and_json_bodies_read_alike() -> None:
    """The SDK's own protobuf encoder (compressed as the SDK does under proto_compress_fwdbwd) and the JSON an SDK
    before 0.22 sends give the same batch, sparse CSR targets included."""
    import zstandard
    from tinker.proto.request_conv import forward_backward_request_to_proto

    from rllm_transformers.tinker_server.wire import PROTOBUF, decode_batch

    dense = datum("ppo")
    sparse_targets = types.TensorData.from_torch_sparse(torch.tensor([TOKENS[1:]]))
    sparse = types.Datum(
        model_input=types.ModelInput.from_ints(TOKENS[:-1]),
        loss_fn_inputs={**dense.loss_fn_inputs, "target_tokens": sparse_targets},
    )
    request = types.ForwardBackwardRequest(
        forward_backward_input=types.ForwardBackwardInput(
            data=[dense, sparse], loss_fn="ppo", loss_fn_config={"clip_low_threshold": 0.7}
        ),
        model_id="m",
        seq_id=1,
    )
    body = zstandard.ZstdCompressor().compress(forward_backward_request_to_proto(request).SerializeToString())
    proto = decode_batch("/api/v1/forward_backward", body, PROTOBUF, "zstd", False)
    wire = {
        "model_id": "m",
        "forward_backward_input": {
            "loss_fn": "ppo",
            "loss_fn_config": {"clip_low_threshold": 0.7},
            "data": [
                {
                    "model_input": {"chunks": [{"tokens": TOKENS[:-1], "type": "encoded_text"}]},
                    "loss_fn_inputs": {
                        name: {"data": np.asarray(value.tolist()).reshape(-1).tolist(), "dtype": value.dtype}
                        for name, value in dense.loss_fn_inputs.items()
                    },
                }
            ]
            * 2,
        },
    }
    plain = decode_batch("/api/v1/forward_backward", json.dumps(wire).encode(), "application/json", "", False)
    assert (proto.model_id, proto.loss_fn, proto.config, proto.forward_only) == (
        "m",
        "ppo",
        {"clip_low_threshold": 0.7},
        False,
    )
    assert (plain.model_id, plain.loss_fn, plain.config) == (proto.model_id, proto.loss_fn, proto.config)
    for mine, theirs in zip(proto.data, plain.data, strict=True):
        assert mine.tokens == theirs.tokens == TOKENS[:-1]
        assert mine.inputs["target_tokens"].tolist() == TOKENS[1:]
        for name in ("target_tokens", "logprobs", "advantages"):
            assert np.array_equal(mine.inputs[name], theirs.inputs[name]), name


def test_the_missing_sdk_is_one_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from rllm.cli.main import main

    monkeypatch.setitem(sys.modules, "tinker", None)
    monkeypatch.delitem(sys.modules, "rllm_transformers.tinker_server.app", raising=False)
    assert main(["serve", "--tinker", *TINY_TEXT, "--port", "1"]) == 2
    assert (
        capsys.readouterr().err.strip()
        == "rllm serve: error: rllm serve --tinker needs tinker: pip install 'rllm[tinker]'."
    )
