"""GPU smoke of ``rllm.backend=verl``: a few ``rllm train`` steps on one CUDA device; tokens/s and the reward printed.

``python bench/verl_gpu_smoke.py`` (one GPU, no network) saves a tiny-width model (Qwen2 layout,
hidden 64, 2 layers) with a real vocabulary (151,936 rows, Qwen2.5's count, tied embedding) and
rllm's tiny text tokenizer to a temporary directory, then runs ``rllm train`` with
``rllm.backend=verl rllm.verl.device=cuda`` on it for ``--steps`` steps of the digit task (``--tasks`` tasks x
``--rollouts`` rollouts), with the KL loss on so verl's reference worker runs too. The LM head,
softmax, sampler and log-prob passes work through every row of the vocabulary; the rows past the
tokenizer's are pointed away from every hidden state (see :func:`save_model`), so the samples stay
in the tokenizer's tokens. Per step it prints the mean reward, the rollouts' tokens/s (the
in-process transformers engine sampling on the GPU) and the update's tokens/s (verl's worker,
``train_batch``); the last line is JSON. The reward is a random model's (near 0): the smoke checks
the path, not learning.

Without CUDA it prints one line saying so and exits 0 (``--device cpu`` runs the same steps on
the CPU: what tests/verl/test_gpu_smoke.py runs, at a small ``--vocab``). Needs
``pip install 'rllm[verl,transformers]'``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REAL_VOCAB = 151_936
"""Qwen2.5's vocabulary: the model's embedding has this many rows."""
SHIFT = 0.5
"""The constant put in channel 0 of every tokenizer row's embedding (the random rows' entries are about 0.02)."""
PUSH = 10.0
"""The padded rows' channel 0: minus this, so their logits are about ``-PUSH`` times the normalised channel 0."""
FIELDS = ("batch/reward", "perf/rollout_tokens_per_s", "perf/update_tokens_per_s", "time/step")


def _missing() -> str | None:
    """Why the smoke cannot run here, in one line; None when it can."""
    specs = {name: importlib.util.find_spec(name) for name in ("torch", "transformers", "verl")}
    absent = [name for name, spec in specs.items() if spec is None or spec.origin is None]  # not a namespace folder
    if absent:
        return f"{', '.join(absent)} not installed: pip install 'rllm[verl,transformers]'"
    return None


def save_model(directory: Path, vocab: int, seed: int = 0) -> None:
    """The tiny-width model with ``vocab`` embedding rows and the tiny text tokenizer, as ``save_pretrained`` writes.

    Every position's residual stream carries channel 0 of its token's embedding (``SHIFT``,
    far above the random entries), so after the final norm channel 0 is positive everywhere;
    the padded rows are ``-PUSH`` there and 0 elsewhere, so through the tied LM head their
    logits are strongly negative and sampling keeps to the tokenizer's rows. The shift is the
    same for every tokenizer row, so it changes no probability among them.
    """
    import torch
    from omegaconf import OmegaConf
    from transformers.utils import logging as transformers_logging

    from rllm_transformers.model import text_tokenizer, tiny_model

    transformers_logging.disable_progress_bar()
    tokenizer = text_tokenizer()
    known = len(tokenizer)
    if vocab < known:
        raise SystemExit(f"verl GPU smoke: --vocab {vocab} is below the tokenizer's {known} tokens; give more.")
    torch.manual_seed(seed)
    shape = OmegaConf.create({"hidden_size": 64, "num_layers": 2})  # rllm's tiny model at its default shape
    model = tiny_model(shape, vocab, tokenizer.pad_token_id, tokenizer.eos_token_id, tokenizer.bos_token_id)
    with torch.no_grad():
        rows = model.get_input_embeddings().weight
        rows[:known, 0] = SHIFT
        rows[known:] = 0.0
        rows[known:, 0] = -PUSH
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)


def run(args: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    """``rllm train`` with ``rllm.backend=verl`` on the saved model; the steps' records."""
    from rllm.trainer.logging import read_metrics

    model = work / "model"
    save_model(model, args.vocab)
    command = [sys.executable, "-m", "rllm.cli.main", "train", "--no-progress", "rllm.backend=verl"]
    command += [
        f"rllm.verl.device={args.device}",
        f"rllm.verl.model.path={model}",
        "rllm.verl.rollout.response_length=16",
        f"rllm.data.train_batch_size={args.tasks}",
        f"rllm.rollout.n={args.rollouts}",
        f"rllm.trainer.total_batches={args.steps}",
        "rllm.trainer.test_freq=0",
        "rllm.trainer.save_freq=0",
        "rllm.trainer.logger=[jsonl]",
        "rllm.algorithm.use_kl_loss=true",
        "rllm.algorithm.kl_loss_coef=0.01",
        f"rllm.trainer.output_dir={work / 'run'}",
    ]
    env = {**os.environ, "RLLM_DISABLED_PLUGINS": os.environ.get("RLLM_DISABLED_PLUGINS", "fast")}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=args.timeout)
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or ["(no output)"]
        raise SystemExit(f"verl GPU smoke: rllm train failed (exit {done.returncode}): {tail[0]}")
    return [r for r in read_metrics(work / "run" / "metrics.jsonl") if r.get("kind") == "train"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--vocab", type=int, default=REAL_VOCAB, help="embedding rows (default: Qwen2.5's)")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--rollouts", type=int, default=4)
    parser.add_argument("--timeout", type=int, default=540, help="seconds rllm train may take")
    args = parser.parse_args(argv)
    why = _missing()
    if why is None and args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            why = "torch sees no CUDA device (or this torch is a CPU build); --device cpu runs the same steps here"
    if why is not None:
        print(f"verl GPU smoke: skipped, {why}.")
        return 0
    with tempfile.TemporaryDirectory(prefix="rllm-verl-smoke-") as name:
        records = run(args, Path(name))
    if len(records) != args.steps:
        raise SystemExit(f"verl GPU smoke: rllm train logged {len(records)} steps, not {args.steps}.")
    print(f"rllm.backend=verl on {args.device}, vocabulary {args.vocab}, {args.tasks} tasks x {args.rollouts} rollouts")
    for record in records:
        figures = ", ".join(f"{key} {record.get(key, float('nan')):.4g}" for key in FIELDS)
        print(f"step {record['step']}: {figures}")
    last = records[-1]
    print(json.dumps({"device": args.device, "vocab": args.vocab, **{key: last.get(key) for key in FIELDS}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
