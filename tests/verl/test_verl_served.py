"""``rllm.backend=verl`` with rollouts from an ``rllm serve`` process: verl's worker trains, the trainer's policy
channel pushes the worker's weights to the server after each update, and the run is the in-process run (one rank,
asynchronous at staleness 0, and 2 ranks under torchrun).

The server starts on the tiny model with the digit tokenizer and seed 0, which are the verl run's initial weights,
and the run's requests are seeded with each episode's seed, so the server draws what the in-process engine draws.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from extras import skip_module_without

skip_module_without(
    "torch", "transformers", "safetensors", "fastapi", "uvicorn", install="pip install 'rllm[verl,serve]' (CI does)"
)

import torch
from safetensors.torch import load_file
from serving import SERVED, free_port, get_json, post_json, start, step_versions, stop
from test_verl_backend import ENV, _records

from rllm.config import load_config
from rllm_transformers.model import load_policy

pytestmark = pytest.mark.slow

STEPS = 3
RUN = (
    "rllm.data.train_batch_size=8",
    "rllm.rollout.n=4",
    f"rllm.trainer.total_batches={STEPS}",
    f"rllm.trainer.test_freq={STEPS}",
    "rllm.verl.num_threads=1",
    "rllm.episode_logging.log_episodes=true",
)
NOISE = "actor/rollout_logprob_diff"
"""The worker's log-probs minus the sampler's: float noise (about 7e-8 here) of a forward pass batched differently
in the server than in the in-process engine."""
FORWARD = 1e-5
"""The server's log-probs against one forward pass of the trained weights: the weights are synced in float32 (the
trained dtype, ``weight_sync_dtype=auto``), so only the batched forward's rounding is left (measured 4.8e-7; against
the initial weights 0.68)."""
PROMPTS = [[8, 2, 11], [3, 9, 11], [5, 5, 11], [1, 7, 11]]
"""digit_max prompts (two digits and the separator, the digit tokenizer's ids)."""


VARIANTS = {"one rank": (), "async": ("rllm.async_training.enable=true",), "two ranks": ()}
"""The served runs: synchronous; asynchronous at staleness 0 (the update on the trainer's update thread); and 2
ranks under torchrun (each rank samples its share from the server, rank 0 alone pushes the weights)."""
RANKS_TOLERANCE = 1e-5
"""2 ranks against 1: the gradient is summed over the ranks in another order (measured: grad_norm 1.2e-7 apart)."""


def _train(run_dir: Path, *overrides: str, ranks: int = 1) -> None:
    command = [sys.executable, "-m", "rllm.cli.main"]
    if ranks > 1:
        port = ["--master_addr", "127.0.0.1", "--master_port", str(free_port())]
        command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(ranks), *port]
        command += ["-m", "rllm.cli.main"]
    command += ["train", "--no-progress", "rllm.backend=verl", "rllm.trainer.logger=[jsonl]"]
    command += [f"rllm.trainer.output_dir={run_dir}", *RUN, *overrides]
    done = subprocess.run(command, capture_output=True, text=True, env=ENV, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]


def _sampled(root: str, prompt: list[int], seed: int) -> dict[str, Any]:
    body = {"model": "tiny", "prompt": prompt, "max_tokens": 6, "logprobs": 0, "seed": seed, "return_token_ids": True}
    status, answer = post_json(f"{root}/v1/completions", body)
    assert status == 200, answer
    return answer  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def runs() -> Iterator[dict[str, Any]]:
    """The in-process run and each served run (a fresh server each, on the initial weights), with what its server
    answers after the run (its version, fresh samples)."""
    with tempfile.TemporaryDirectory(prefix="rllm-verl-served-") as name:
        tmp = Path(name)
        _train(tmp / "local")
        health, samples = {}, {}
        for variant, overrides in VARIANTS.items():
            server, root = start(*SERVED)
            try:
                ranks = 2 if variant == "two ranks" else 1
                _train(tmp / variant, f"rllm.rollout.openai.base_url=[{root}/v1]", *overrides, ranks=ranks)
                health[variant] = get_json(f"{root}/health")
                samples[variant] = [_sampled(root, prompt, seed) for seed, prompt in enumerate(PROMPTS)]
            finally:
                stop(server)
        yield {"dir": tmp, "health": health, "samples": samples}


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_step_samples_the_policy_version_it_trains(runs: dict[str, Any], variant: str) -> None:
    """Step u samples the weights of u - 1 updates (version 0: the server's own, the initial ones), as the server
    reports it in its answers, and after the last step the server holds version 3 (the final validation sampled it)."""
    served = runs["dir"] / variant
    assert step_versions(served) == {u: {u - 1} for u in range(1, STEPS + 1)}
    assert runs["health"][variant]["weight_version"] == STEPS
    records = _records(served, "train")
    assert [r["step"] for r in records] == list(range(1, STEPS + 1))
    assert all(r["rollout/staleness/max"] == 0 and "time/weight_sync" in r for r in records), records


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_server_holds_the_trained_weights_after_the_run(runs: dict[str, Any], variant: str) -> None:
    """The weights sent last are the checkpoint's to the bit (float32 sync), and the server's log-probs are one forward
    pass of them, not of the initial weights."""
    from transformers import AutoModelForCausalLM

    checkpoint = runs["dir"] / variant / "checkpoints" / f"step_{STEPS}" / "model"
    trained = load_file(str(checkpoint / "model.safetensors"))
    sent = load_file(str(runs["dir"] / variant / "weight_sync" / f"weights_v{STEPS}" / "model.safetensors"))
    assert sent.keys() == trained.keys() and all(torch.equal(sent[k], trained[k]) for k in trained)

    model = AutoModelForCausalLM.from_pretrained(checkpoint).eval()
    initial = load_policy(load_config(overrides=list(SERVED)).rllm.transformers).model.eval()  # the server's start
    worst_trained = worst_initial = 0.0
    for answer in runs["samples"][variant]:
        assert answer["weight_version"] == STEPS
        choice = answer["choices"][0]
        prompt, completion = choice["prompt_token_ids"], choice["token_ids"]
        got = torch.tensor(choice["logprobs"]["token_logprobs"])
        worst_trained = max(worst_trained, float((got - _forward(model, prompt, completion)).abs().max()))
        worst_initial = max(worst_initial, float((got - _forward(initial, prompt, completion)).abs().max()))
    assert worst_trained <= FORWARD, worst_trained
    assert worst_initial > 1e-3, worst_initial  # the check can tell the trained weights from the initial ones


def _forward(model: Any, prompt: list[int], completion: list[int]) -> torch.Tensor:
    """log p(each completion token | what precedes it), one forward pass over the whole sequence."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + completion])).logits[0].float()
    log_p = torch.log_softmax(logits[len(prompt) - 1 : -1], dim=-1)
    return log_p.gather(-1, torch.tensor(completion)[:, None]).squeeze(-1)


def _numbers(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What a run computed: every metric but the clocks, the asynchronous run's own and the sampler's noise."""
    skipped = ("time/", "perf/", "async/", "wall_time", NOISE)
    return [{k: v for k, v in r.items() if not k.startswith(skipped)} for r in records]


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_served_run_gives_the_in_process_runs_metrics(runs: dict[str, Any], variant: str) -> None:
    """Same seed: the server draws each episode's tokens as the in-process engine does, from the same weights at each
    step, so every metric of one rank is the in-process run's exactly (asynchronous at staleness 0 too); only the
    clocks and the sampler's log-prob noise (``NOISE``, which depends on how requests were batched) differ, the
    latter within 1e-6. 2 ranks sum the gradient in another order: their numbers within ``RANKS_TOLERANCE``."""
    local, served = runs["dir"] / "local", runs["dir"] / variant
    for kind in ("train", "val"):
        ours, theirs = _records(served, kind), _records(local, kind)
        assert len(ours) == {"train": STEPS, "val": 2}[kind]
        for a, b in zip(ours, theirs, strict=True):
            assert a.get(NOISE, 0.0) == pytest.approx(b.get(NOISE, 0.0), abs=1e-6)
        if variant != "two ranks":
            assert _numbers(ours) == _numbers(theirs)
            continue
        for a, b in zip(_numbers(ours), _numbers(theirs), strict=True):
            assert a.keys() == b.keys()
            floats = {k for k, v in b.items() if isinstance(v, float)}
            assert floats and {k: a[k] for k in a.keys() - floats} == {k: b[k] for k in b.keys() - floats}
            assert all(abs(a[k] - b[k]) <= RANKS_TOLERANCE * max(abs(b[k]), 1e-6) for k in floats), (a, b)
    trained = _records(local, "train")
    assert any(r["actor/grad_norm"] > 0 for r in trained)  # the updates moved the policy, so the steps say something
    passes = [r["val/digit_max/pass@1"] for r in _records(local, "val")]
    assert passes[-1] > passes[0], passes
