"""The project's own GPU check: the transformers backend on a Qwen2.5-1.5B-shaped model, beside TRL's recipe.

``python bench/gpu.py`` on one GPU (no network: the model is built from a config with random
weights; hidden 1536, 28 layers, 12 heads, 2 key-value heads, MLP 8960, vocabulary 151,936,
tied embeddings) measures, for rllm's transformers backend in
``precision=bf16-mixed`` with ``gradient_checkpointing=true`` (float32 weights and AdamW state,
the forward under bfloat16 autocast, TF32 matmuls):

- **sampling tokens/s**: :meth:`rllm_transformers.engine.TransformersEngine.sample` (the engine
  ``rllm train`` and ``rllm serve`` sample with: draws on the device, prefill logits of the last
  position only) over ``--prompts`` prompts of ``--prompt-tokens`` random ids, ``--response-tokens``
  each (no end-of-sequence token, so every row runs the whole length);
- **update tokens/s**: one optimizer step over ``--rows`` rows of prompt + response tokens:
  :func:`rllm_transformers.logprobs.score_tokens` (chunked log-probs, entropy without a gradient
  for the metric), PPO's clipped loss (token mean over the response), backward, clipping at 1.0,
  AdamW; the first step is untimed (it allocates AdamW's state), then ``--updates`` are timed;
- **peak memory** of the first update (``torch.cuda.max_memory_allocated``: weights, gradients,
  AdamW state and activations; the sampling's KV cache is freed by then), and **the fraction of
  weights one update changes** at lr 1e-6.

The baseline is the same batch through TRL's ``GRPOTrainer`` recipe on the same model, built
from the same seed: its sampling is ``model.generate`` (what ``GRPOTrainer`` calls without vLLM)
under bfloat16 autocast (``bf16=True``, its default), its update the model with TRL's fused
LM head (``trl.trainer.utils.add_fused_lm_head``, as ``_compute_loss`` calls it) under the same
autocast, checkpointing and loss. Ratios are rllm over TRL (above 1 is faster; peak memory
below 1 is smaller).

Run: ``python bench/gpu.py`` (a few minutes on an H100; under 8 at the defaults), or
``python bench/gpu.py --tiny`` for a small shape that runs on the CPU in seconds (what the test
runs: tests/bench/test_gpu_bench.py). The last line is the figures as JSON. Needs
``pip install 'rllm[transformers]'`` and trl.
"""

from __future__ import annotations

import argparse
import gc
import json
import time
from collections.abc import Callable
from typing import Any

import torch
from memory import SHAPE, clipped_loss
from transformers import AutoModelForCausalLM, Qwen2Config

TINY_SHAPE = {
    **SHAPE,
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 128,
    "max_position_embeddings": 512,
}
"""``--tiny``: the real vocabulary on a narrow, shallow model (the code path, not the figures)."""
LR = 1e-6
FIELDS = (
    "rllm_sampling_tokens_per_s",
    "trl_sampling_tokens_per_s",
    "sampling_ratio",
    "rllm_update_tokens_per_s",
    "trl_update_tokens_per_s",
    "update_ratio",
    "rllm_peak_gib",
    "trl_peak_gib",
    "peak_ratio",
    "rllm_weights_changed",
    "trl_weights_changed",
)
"""The JSON line's figures (peak memory is null on the CPU)."""


class NoTextTokenizer:
    """What the engine asks of a tokenizer when it samples ids: padding, no end-of-sequence (every row runs the
    whole length, as TRL's ``generate`` does here), and text nobody reads."""

    pad_token_id = 0
    eos_token_id = None

    def decode(self, ids: Any, skip_special_tokens: bool = True) -> str:
        return ""


def build(shape: dict[str, Any], device: torch.device, seed: int) -> Any:
    """The model from its config with random float32 weights, built on ``device`` (the same ones for a seed)."""
    torch.manual_seed(seed)
    config = Qwen2Config(**shape)
    config._attn_implementation = "sdpa"
    with device:
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.generation_config.pad_token_id = NoTextTokenizer.pad_token_id
    model.generation_config.eos_token_id = None
    return model


def synchronized(device: torch.device, work: Callable[[], Any]) -> float:
    """Seconds ``work`` takes, the device's queue drained before and after."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    started = time.perf_counter()
    work()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - started


def rllm_model(shape: dict[str, Any], device: torch.device, seed: int) -> Any:
    """The model as ``rllm.transformers.precision=bf16-mixed gradient_checkpointing=true`` leaves it."""
    from omegaconf import OmegaConf

    from rllm_transformers.precision import precision_of

    model = build(shape, device, seed)
    precision_of(OmegaConf.create({"precision": "bf16-mixed"})).prepare(model, device)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model


def trl_model(shape: dict[str, Any], device: torch.device, seed: int) -> Any:
    """The model as GRPOTrainer trains it (bf16 autocast and checkpointing are its defaults), with its fused head."""
    from trl.trainer.utils import add_fused_lm_head

    model = build(shape, device, seed)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    add_fused_lm_head(model, temperature=1.0, cast_lm_head_to_fp32=False, outputs=("log_probs", "entropy"))
    return model


def rllm_sampling(model: Any, prompts: torch.Tensor, response: int, device: torch.device) -> float:
    """Tokens per second of the engine's batched sampling, each row drawing from its own stream."""
    from rllm_transformers.engine import SampleRequest, Sampling, TransformersEngine, UniformStream

    engine = TransformersEngine(
        model, NoTextTokenizer(), device, UniformStream(0), Sampling(), response, prompts.shape[1], False
    )
    rows = [row.tolist() for row in prompts]

    def requests() -> list[SampleRequest]:
        return [
            SampleRequest(row, response, None, UniformStream(i))  # type: ignore[arg-type]
            for i, row in enumerate(rows)
        ]

    engine.sample(requests()[:1])  # untimed: the first call's one-off costs
    made: list[Any] = []
    seconds = synchronized(device, lambda: made.extend(engine.sample(requests())))
    return sum(len(g.response_ids) for g in made) / seconds


def trl_sampling(model: Any, prompts: torch.Tensor, response: int, device: torch.device) -> float:
    """Tokens per second of ``model.generate`` as GRPOTrainer calls it (sampling at temperature 1, no cut)."""
    ids = prompts.to(device)
    mask = torch.ones_like(ids)
    options = {"do_sample": True, "top_k": 0, "top_p": 1.0, "temperature": 1.0, "max_new_tokens": response}

    def generate(rows: torch.Tensor, attention: torch.Tensor) -> torch.Tensor:
        with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16):
            return model.generate(input_ids=rows, attention_mask=attention, **options)  # type: ignore[no-any-return]

    model.eval()  # TRL generates with checkpointing off (a checkpointed model in training mode drops its KV cache)
    generate(ids[:1], mask[:1])  # untimed
    made: list[torch.Tensor] = []
    seconds = synchronized(device, lambda: made.append(generate(ids, mask)))
    return (made[0].shape[1] - ids.shape[1]) * ids.shape[0] / seconds


def update_figures(
    model: Any, step: Callable[[], torch.Tensor], device: torch.device, tokens: int, updates: int
) -> tuple[float, float | None, float]:
    """Tokens per second of ``updates`` timed optimizer steps (after one untimed), the peak memory in GiB (None on
    the CPU), and the fraction of weights the first timed step changed."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)

    def one() -> None:
        step().backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    model.train()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    one()  # untimed: AdamW's state is allocated here, so its peak is the update's (before the copy below)
    peak = torch.cuda.max_memory_allocated(device) / 1024**3 if device.type == "cuda" else None
    before = [p.detach().clone() for p in model.parameters()]
    seconds = synchronized(device, one)
    changed = sum(int((p.detach() != b).sum()) for p, b in zip(model.parameters(), before, strict=True))
    total = sum(b.numel() for b in before)
    del before
    if updates > 1:
        seconds += synchronized(device, lambda: [one() for _ in range(updates - 1)])
    return tokens * updates / seconds, peak, changed / total


def batch(rows: int, prompt: int, response: int, vocab: int, device: torch.device) -> dict[str, torch.Tensor]:
    """Random ids, full attention, the response positions' mask and one advantage per row (seeded: both sides)."""
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(0, vocab, (rows, prompt + response), generator=generator).to(device)
    mask = torch.zeros(rows, prompt + response - 1, device=device)
    mask[:, prompt - 1 :] = 1.0
    advantages = torch.randn(rows, 1, generator=generator).to(device)
    return {"ids": ids, "attention": torch.ones_like(ids), "mask": mask, "advantages": advantages}


def rllm_step(model: Any, data: dict[str, torch.Tensor], prompt: int) -> Callable[[], torch.Tensor]:
    from rllm_transformers.logprobs import score_tokens

    def loss() -> torch.Tensor:
        scores = score_tokens(model, data["ids"], data["attention"], prompt - 1, entropy=True)
        return clipped_loss(scores.log_probs, data["advantages"], data["mask"])

    return loss


def trl_step(model: Any, data: dict[str, torch.Tensor], response: int, device: torch.device) -> Callable[[], Any]:
    ids, attention = data["ids"], data["attention"]
    labels = ids.masked_fill(attention == 0, -100)
    labels[:, :-response] = -100

    def loss() -> torch.Tensor:
        with torch.autocast(device.type, dtype=torch.bfloat16):
            out = model(input_ids=ids, attention_mask=attention, labels=labels, fused_lm_head=True)
        return clipped_loss(out.log_probs[:, -response:], data["advantages"], data["mask"][:, -response:])

    return loss


def release(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def ratio(ours: float | None, theirs: float | None) -> float | None:
    return None if ours is None or not theirs else ours / theirs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="a narrow 2-layer model at the real vocabulary (CPU)")
    parser.add_argument("--device", default="auto", help="auto (cuda when there is one), cuda or cpu")
    parser.add_argument("--prompts", type=int, default=None, help="rows sampled at once (64; --tiny 4)")
    parser.add_argument("--prompt-tokens", type=int, default=None, help="tokens per prompt (256; --tiny 8)")
    parser.add_argument("--response-tokens", type=int, default=None, help="tokens sampled per row (256; --tiny 8)")
    parser.add_argument("--rows", type=int, default=None, help="rows of the update (8; --tiny 4)")
    parser.add_argument("--updates", type=int, default=None, help="timed optimizer steps (3; --tiny 1)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    tiny = args.tiny
    device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device)
    shape = TINY_SHAPE if tiny else SHAPE
    prompts = args.prompts or (4 if tiny else 64)
    prompt = args.prompt_tokens or (8 if tiny else 256)
    response = args.response_tokens or (8 if tiny else 256)
    rows, updates = args.rows or (4 if tiny else 8), args.updates or (1 if tiny else 3)
    update_prompt, update_response = (prompt, response) if tiny else (512, 1536)
    name = "tiny (hidden 64, 2 layers)" if tiny else "Qwen2.5-1.5B shape (hidden 1536, 28 layers)"
    print(f"gpu check: {name}, vocabulary {shape['vocab_size']:,}, tied; device {device}", flush=True)
    print(f"  sampling: {prompts} prompts x {prompt} tokens, {response} sampled each, temperature 1")
    print(f"  update: {rows} rows x {update_prompt} + {update_response} tokens, lr {LR}, bf16 autocast, checkpointing")
    if device.type == "cuda":
        print(f"  GPU: {torch.cuda.get_device_name(device)}, torch {torch.__version__}")
    sample_ids = torch.randint(0, shape["vocab_size"], (prompts, prompt), generator=torch.Generator().manual_seed(2))
    data = batch(rows, update_prompt, update_response, shape["vocab_size"], device)
    tokens = rows * (update_prompt + update_response)
    figures: dict[str, Any] = {}
    for side, make, step in (
        ("rllm", rllm_model, lambda m: rllm_step(m, data, update_prompt)),
        ("trl", trl_model, lambda m: trl_step(m, data, update_response, device)),
    ):
        model = make(shape, device, args.seed)
        sampler = rllm_sampling if side == "rllm" else trl_sampling
        figures[f"{side}_sampling_tokens_per_s"] = sampler(model, sample_ids, response, device)
        speed, peak, changed = update_figures(model, step(model), device, tokens, updates)
        figures[f"{side}_update_tokens_per_s"], figures[f"{side}_peak_gib"] = speed, peak
        figures[f"{side}_weights_changed"] = changed
        peak_text = "n/a on the CPU" if peak is None else f"{peak:.2f} GiB"
        print(
            f"  {'rllm (transformers backend)' if side == 'rllm' else 'TRL GRPOTrainer recipe':28s} "
            f"sampling {figures[f'{side}_sampling_tokens_per_s']:10.1f} tokens/s, update {speed:10.1f} tokens/s, "
            f"peak {peak_text}, weights changed by one update {changed:.1%}",
            flush=True,
        )
        del model
        release(device)
    for kind, key in (("sampling", "sampling_tokens_per_s"), ("update", "update_tokens_per_s"), ("peak", "peak_gib")):
        figures[f"{kind}_ratio"] = ratio(figures[f"rllm_{key}"], figures[f"trl_{key}"])
    shown = {
        k: "n/a" if figures[f"{k}_ratio"] is None else f"{figures[f'{k}_ratio']:.2f}x"
        for k in ("sampling", "update", "peak")
    }
    print(f"  rllm / TRL: sampling {shown['sampling']}, update {shown['update']}, peak memory {shown['peak']}")
    print(json.dumps({"shape": "tiny" if tiny else "qwen2.5-1.5b", "device": str(device), **figures}))


if __name__ == "__main__":
    main()
