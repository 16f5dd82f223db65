"""verl's own training worker (TrainingWorker, FSDP2 on gloo, rllm_verl's CPU platform) against the transformers
backend on one rllm batch: the same tiny model directory, the same rows (a multi-turn row among them), the same
advantages, seed and loss. The worker runs in a child process (it starts a process group), 1 rank and 2 under
torchrun; the transformers backend's numbers are computed here by its own stages 4, 5 and 7.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from extras import skip_module_without

skip_module_without("torch", "transformers", "safetensors", install="pip install 'rllm[verl,transformers]' (CI does)")

import torch
from safetensors.torch import load_file, save_file
from verl_batches import two_groups

from rllm.config import load_config
from rllm.trainer import TrainerState, UnifiedTrainer
from rllm.types import TrajectoryGroup

pytestmark = pytest.mark.slow

RUNNER = Path(__file__).with_name("worker_run.py")
LOSSES = [("vanilla", "token-mean"), ("gspo", "seq-mean-token-mean")]
"""The second loss has a sequence-level ratio and divides by the batch's sequences: verl's global_batch_size."""
TOLERANCE = 1e-5
WEIGHTS = 5e-5
"""Updated weights: Adam's first step is about ``lr * g / |g|``, which turns a gradient's rounding near 0 into a
visible step (6e-6 measured); a wrong update differs by about ``lr`` (1e-3)."""


def _config(tmp: Path, loss: str = "vanilla", mode: str = "token-mean", model: str = "tiny") -> Any:
    return load_config(
        overrides=[
            "rllm.backend=transformers",
            "rllm.transformers.device=cpu",
            "rllm.transformers.num_threads=1",
            f"rllm.transformers.model={model}",
            "rllm.transformers.micro_batches=2",
            f"rllm.algorithm.loss_fn={loss}",
            f"rllm.algorithm.loss_agg_mode={mode}",
            f"rllm.trainer.output_dir={tmp / 'run'}",
        ]
    )


def _transformers_update(config: Any, groups: list[TrajectoryGroup]) -> tuple[Any, dict[str, float], Any]:
    """The transformers backend's stages 4, 5 and 7 on ``groups``: its batch, metrics and model after the update."""
    trainer = UnifiedTrainer(None, config, progress=False)
    try:
        backend = trainer.backend
        state = TrainerState(global_step=1, total_steps=1, trajectory_groups=groups)
        state.backend_batch = backend.transform_to_backend_batch(state)
        asyncio.run(backend.process_backend_batch(state))
        asyncio.run(backend.update_policy(state))
        return state.backend_batch, state.metrics, backend.model
    finally:
        trainer.shutdown()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _run_worker(tmp: Path, model: Path, batch: Any, options: dict[str, Any], ranks: int) -> Path:
    out = tmp / f"out{ranks}"
    out.mkdir()
    save_file(
        {
            "ids": batch.ids,
            "attention": batch.attention,
            "mask": batch.mask,
            "advantages": batch.advantages(),
        },
        str(tmp / "batch.safetensors"),
    )
    spec = {
        "model": str(model),
        "batch": str(tmp / "batch.safetensors"),
        "out": str(out),
        "options": {k: v for k, v in options.items() if k != "pad_id"},
        "losses": LOSSES,
        "pad_id": options["pad_id"],
    }
    (tmp / "spec.json").write_text(json.dumps(spec))
    launcher = [sys.executable] if ranks == 1 else [sys.executable, "-m", "torch.distributed.run"]
    if ranks > 1:
        launcher += ["--nproc_per_node", str(ranks), "--master_addr", "127.0.0.1", "--master_port", str(_free_port())]
    env = {**os.environ, "VERL_PLATFORM": "cpu", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [*launcher, str(RUNNER), str(tmp / "spec.json")], env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return out


@pytest.fixture(scope="module")
def runs() -> Iterator[dict[str, Any]]:
    """The transformers backend's update for each loss, the model directory and the batch the worker gets.

    A directory of its own, not pytest's: pytest prunes its older base directories when other pytest
    sessions start, which could take this one away while the worker's children read it.
    """
    with tempfile.TemporaryDirectory(prefix="rllm-verl-worker-") as name:
        yield _prepare(Path(name))


def _prepare(tmp: Path) -> dict[str, Any]:
    model = tmp / "model"
    trainer = UnifiedTrainer(None, _config(tmp), progress=False)
    trainer.backend.model.save_pretrained(model)
    trainer.backend.tokenizer.save_pretrained(model)
    vocab = int(trainer.backend.model.get_input_embeddings().num_embeddings)
    pad = int(trainer.backend.tokenizer.pad_token_id)
    trainer.shutdown()
    expected = {}
    for loss, mode in LOSSES:
        config = _config(tmp, loss, mode, str(model))
        batch, metrics, updated = _transformers_update(config, two_groups(vocab))
        expected[loss] = (metrics, {k: v.detach().clone() for k, v in updated.state_dict().items()})
    options = config.rllm.transformers
    worker_options = {
        "lr": float(options.lr),
        "betas": [float(options.adam_beta1), float(options.adam_beta2)],
        "weight_decay": float(options.weight_decay),
        "max_grad_norm": float(options.max_grad_norm),
        "micro_batches": int(options.micro_batches),
    }
    worker_options["pad_id"] = pad
    return {"tmp": tmp, "model": model, "batch": batch, "expected": expected, "options": worker_options}


@pytest.fixture(scope="module")
def one_rank(runs: dict[str, Any]) -> Path:
    return _run_worker(runs["tmp"], runs["model"], runs["batch"], runs["options"], 1)


def test_the_workers_log_probs_are_the_transformers_backends(runs: dict[str, Any], one_rank: Path) -> None:
    from transformers import AutoModelForCausalLM

    from rllm_transformers.batch import token_log_probs

    batch = runs["batch"]
    model = AutoModelForCausalLM.from_pretrained(runs["model"]).eval()
    with torch.no_grad():
        expected, _ = token_log_probs(model, batch.ids, batch.attention)
    got = load_file(str(one_rank / "logp.safetensors"))["logp"]
    assert got.shape == batch.mask.shape
    # verl scores a row's whole response block (a later turn's observation tokens too), nothing before it
    positions = torch.arange(batch.mask.shape[1])
    first = batch.mask.argmax(1, keepdim=True)
    block = (positions >= first) & (positions < batch.attention.sum(1, keepdim=True) - 1)
    gap = float((got - expected)[block].abs().max())
    assert gap <= TOLERANCE, gap
    assert float(got[~block].abs().max()) == 0.0
    assert float(batch.mask[0].sum()) == 5 + 4 and int(block[0].sum()) == 5 + 3 + 4  # the two-turn row


@pytest.mark.parametrize(("loss", "mode"), LOSSES)
def test_one_update_through_the_worker_is_the_transformers_backends(
    runs: dict[str, Any], one_rank: Path, loss: str, mode: str
) -> None:
    metrics, weights = runs["expected"][loss]
    got = json.loads((one_rank / f"{loss}.json").read_text())
    for name, key in (("loss", "actor/loss"), ("grad_norm", "actor/grad_norm")):
        assert abs(got[name] - metrics[key]) <= TOLERANCE * abs(metrics[key]), (name, got[name], metrics[key])
    updated = load_file(str(one_rank / f"{loss}.safetensors"))
    moved = max(float((weights[k] - updated[k]).abs().max()) for k in weights)
    assert moved <= WEIGHTS, moved


def test_two_ranks_under_torchrun_give_the_one_rank_numbers(runs: dict[str, Any], one_rank: Path) -> None:
    two = _run_worker(runs["tmp"], runs["model"], runs["batch"], runs["options"], 2)
    one_logp = load_file(str(one_rank / "logp.safetensors"))["logp"]
    assert float((load_file(str(two / "logp.safetensors"))["logp"] - one_logp).abs().max()) <= TOLERANCE
    for loss, _ in LOSSES:
        one, both = (json.loads((d / f"{loss}.json").read_text()) for d in (one_rank, two))
        for name in ("loss", "grad_norm"):
            assert abs(both[name] - one[name]) <= TOLERANCE * abs(one[name]), (loss, name, both[name], one[name])
