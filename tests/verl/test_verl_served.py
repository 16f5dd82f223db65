"""``rllm.backend=verl`` with rollouts from an ``rllm serve`` process: verl's worker trains, the trainer's policy
channel pushes the worker's weights to the server after each update, and the run is the in-process run.

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
from serving import SERVED, get_json, post_json, start, step_versions, stop
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


def _train(run_dir: Path, *overrides: str) -> None:
    command = [sys.executable, "-m", "rllm.cli.main", "train", "--no-progress", "rllm.backend=verl"]
    command += ["rllm.trainer.logger=[jsonl]", f"rllm.trainer.output_dir={run_dir}", *RUN, *overrides]
    done = subprocess.run(command, capture_output=True, text=True, env=ENV, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]


def _sampled(root: str, prompt: list[int], seed: int) -> dict[str, Any]:
    body = {"model": "tiny", "prompt": prompt, "max_tokens": 6, "logprobs": 0, "seed": seed, "return_token_ids": True}
    status, answer = post_json(f"{root}/v1/completions", body)
    assert status == 200, answer
    return answer  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def runs() -> Iterator[dict[str, Any]]:
    """The in-process run, the served run, and what the server answers after it (its version, fresh samples)."""
    with tempfile.TemporaryDirectory(prefix="rllm-verl-served-") as name:
        tmp = Path(name)
        _train(tmp / "local")
        server, root = start(*SERVED)
        try:
            _train(tmp / "served", f"rllm.rollout.openai.base_url=[{root}/v1]")
            health = get_json(f"{root}/health")
            samples = [_sampled(root, prompt, seed) for seed, prompt in enumerate(PROMPTS)]
        finally:
            stop(server)
        yield {"dir": tmp, "health": health, "samples": samples}


def test_every_step_samples_the_policy_version_it_trains(runs: dict[str, Any]) -> None:
    """Synchronous: step u samples the weights of u - 1 updates (version 0: the server's own, the initial ones), and
    after the last step the server holds version 3 (the final validation sampled it)."""
    served = runs["dir"] / "served"
    assert step_versions(served) == {u: {u - 1} for u in range(1, STEPS + 1)}
    assert runs["health"]["weight_version"] == STEPS
    records = _records(served, "train")
    assert [r["step"] for r in records] == list(range(1, STEPS + 1))
    assert all(r["rollout/staleness/max"] == 0 and "time/weight_sync" in r for r in records), records


def test_the_server_holds_the_trained_weights_after_the_run(runs: dict[str, Any]) -> None:
    """The weights sent last are the checkpoint's to the bit (float32 sync), and the server's log-probs are one forward
    pass of them, not of the initial weights."""
    from transformers import AutoModelForCausalLM

    served = runs["dir"] / "served"
    trained = load_file(str(served / "checkpoints" / f"step_{STEPS}" / "model" / "model.safetensors"))
    sent = load_file(str(served / "weight_sync" / f"weights_v{STEPS}" / "model.safetensors"))
    assert sent.keys() == trained.keys() and all(torch.equal(sent[k], trained[k]) for k in trained)

    model = AutoModelForCausalLM.from_pretrained(served / "checkpoints" / f"step_{STEPS}" / "model").eval()
    initial = load_policy(load_config(overrides=list(SERVED)).rllm.transformers).model.eval()  # the server's start
    worst_trained = worst_initial = 0.0
    for answer in runs["samples"]:
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


def test_the_served_run_gives_the_in_process_runs_metrics(runs: dict[str, Any]) -> None:
    """Same seed: the server draws each episode's tokens as the in-process engine does, from the same weights at each
    step, so every metric is the in-process run's exactly; only wall-clock times and the sampler's log-prob noise
    (``NOISE``, which depends on how requests were batched) differ, the latter within 1e-6."""
    local, served = runs["dir"] / "local", runs["dir"] / "served"

    def numbers(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        skipped = ("time/", "perf/", "wall_time", NOISE)
        return [{k: v for k, v in r.items() if not k.startswith(skipped)} for r in records]

    for kind in ("train", "val"):
        ours, theirs = _records(served, kind), _records(local, kind)
        assert len(ours) == {"train": STEPS, "val": 2}[kind]
        assert numbers(ours) == numbers(theirs)
        for a, b in zip(ours, theirs, strict=True):
            assert a.get(NOISE, 0.0) == pytest.approx(b.get(NOISE, 0.0), abs=1e-6)
    trained = _records(local, "train")
    assert any(r["actor/grad_norm"] > 0 for r in trained)  # the updates moved the policy, so the steps say something
    passes = [r["val/digit_max/pass@1"] for r in _records(local, "val")]
    assert passes[-1] > passes[0], passes
