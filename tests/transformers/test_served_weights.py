"""A tied-embedding model (the tiny model ties ``lm_head`` to ``embed_tokens``, as Qwen2.5-0.5B to 3B do) trained
against ``rllm serve`` through a weight sync writing bfloat16: what the sync writes, and what the server holds.

The ``vllm`` sync writes through the same ``save`` as ``disk`` (tests/engine/test_weight_sync.py checks
which dtype each sync asks for); vLLM is not installed here, so ``rllm serve`` takes the directory.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from extras import skip_module_without
from serving import SERVED, get_json, post_json, running, served_run

skip_module_without("torch", "transformers", "safetensors", "fastapi", "uvicorn", install="pip install 'rllm[serve]'")

import torch
from safetensors.torch import load_file

pytestmark = pytest.mark.slow
PROMPT = [3, 4, 5, 6]
"""Token ids of the digit tokenizer, sent as they are."""


def test_a_tied_model_trains_against_a_server_on_its_weights_cast_to_bfloat16(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with running(*SERVED, "rllm.transformers.precision=bf16-pure") as root:  # a server holding bfloat16 weights
        done = subprocess.run(
            served_run(
                run_dir,
                "rllm.trainer.total_batches=1",
                "rllm.trainer.test_freq=0",
                "rllm.trainer.val_before_train=false",
                f"rllm.rollout.openai.base_url=[{root}/v1]",
                "rllm.rollout.openai.weight_sync_dtype=bfloat16",
            ),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        assert get_json(f"{root}/health")["weight_version"] == 1  # the first weights, then the step's update
        written = load_file(str(run_dir / "weight_sync" / "weights_v1" / "model.safetensors"))
        trained = load_file(str(run_dir / "checkpoints" / "step_1" / "model" / "model.safetensors"))
        # what the server holds: its log-probs of a greedy reply equal a bfloat16 forward pass of the written weights
        status, answer = post_json(
            f"{root}/v1/completions",
            {
                "model": "tiny",
                "prompt": PROMPT,
                "max_tokens": 4,
                "temperature": 0,
                "logprobs": 0,
                "return_token_ids": True,
            },
        )
        assert status == 200, answer
    choice = answer["choices"][0]
    expected = _greedy_logprobs(written, PROMPT, choice["token_ids"])
    assert choice["logprobs"]["token_logprobs"] == pytest.approx(expected, abs=1e-6)
    assert "lm_head.weight" not in written  # tied: written once, as save_pretrained writes it
    assert {tensor.dtype for tensor in written.values()} == {torch.bfloat16}
    assert trained["model.embed_tokens.weight"].dtype == torch.float32  # the trainer's own weights stay float32
    assert set(written) == set(trained) - {"lm_head.weight"}
    for name, tensor in written.items():
        assert torch.equal(tensor, trained[name].to(torch.bfloat16)), name  # one cast of the trained weights
    assert not torch.equal(trained["model.embed_tokens.weight"].to(torch.bfloat16), _initial_embeddings()), (
        "the step changed the embeddings (else the comparison says nothing)"
    )


def _policy(*overrides: str):  # type: ignore[no-untyped-def]
    from rllm.config import load_config
    from rllm_transformers.model import load_policy

    return load_policy(load_config(overrides=[*SERVED, *overrides]).rllm.transformers)


def _greedy_logprobs(weights: dict[str, torch.Tensor], prompt: list[int], reply: list[int]) -> list[float]:
    """The log-probs of ``reply`` after ``prompt`` under ``weights`` in a bfloat16 model (the tied head is the
    embeddings, as from_pretrained ties it)."""
    model = _policy("rllm.transformers.precision=bf16-pure").model
    model.load_state_dict(weights, strict=False)
    ids = torch.tensor([prompt + reply])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1].float()
    return logits.log_softmax(-1).gather(-1, torch.tensor(reply)[:, None])[:, 0].tolist()


def _initial_embeddings() -> torch.Tensor:
    """The tiny model's first embeddings (seed 0), in bfloat16."""
    return _policy().model.model.embed_tokens.weight.detach().to(torch.bfloat16)
