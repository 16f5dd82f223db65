"""Peak memory of one policy update of the Qwen2.5-1.5B shape: rllm's update path beside TRL's recipe.

The model is built from a config (hidden 1536, 28 layers, 12 heads, 2 key-value heads, MLP
8960, vocabulary 151,936, tied embeddings) under ``FakeTensorMode``: tensors have shapes and
no storage, so nothing is allocated and nothing is computed. ``MemTracker`` (torch's
``torch.distributed._tools.mem_tracker``) counts every tensor's bytes as the ops create and
free them, and reports the peak by kind (parameters, gradients, optimizer state,
activations, temporaries). The batch is 8 rows of 2,048 tokens (512 prompt, 1,536 response);
one update is a forward, a backward, gradient clipping and an AdamW step, both sides with
float32 weights and AdamW state, the forward under bfloat16 autocast and activation
checkpointing (non-reentrant), the loss over the response positions only:

- **rllm**: ``rllm.transformers.precision=bf16-mixed gradient_checkpointing=true``: the
  model as :func:`rllm_transformers.precision.Precision.prepare` leaves it,
  :func:`rllm_transformers.logprobs.score_tokens` (log-probs in chunks of positions, entropy
  without a gradient for the metric) and PPO's clipped loss.
- **TRL** (1.16, GRPOTrainer's defaults: ``bf16=True``, ``gradient_checkpointing=True``,
  ``loss_type=dapo``, entropy computed for its metric): the model patched with
  ``trl.trainer.utils.add_fused_lm_head`` and called as ``_compute_loss`` calls it, then the
  same loss (its DAPO: PPO's clip, token mean).
- **rllm before** (for the record): ``dtype=bfloat16`` weights and AdamW state, no
  checkpointing, the whole ``[rows, tokens, vocab]`` float32 log-softmax, exp, entropy and
  squares (what the backend did until ``precision`` and ``score_tokens``).

Then, for ``strategy=fsdp``, what rank 0 holds at 2, 4 and 8 ranks (``--ranks``) with a reference policy, before
and after the reference was sharded and the whole-copy gathers dropped, with bf16-mixed's FSDP policy, and with
rollouts from servers (no whole model on a device): the model sharded with the trainer's own cut and policy on the
meta device over a fake process group (``--fsdp-only``: that table alone, in seconds; docs/scaling.md).

Run: ``python bench/memory.py`` (about a minute; ``--rows``/``--prompt``/``--response`` to change
the batch). Needs ``pip install 'rllm[transformers]'`` and trl for the TRL side.
"""

from __future__ import annotations

import argparse
import gc
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.distributed._tools.mem_tracker import MemTracker
from transformers import AutoModelForCausalLM, Qwen2Config

GIB = 1024**3
SHAPE = {
    "hidden_size": 1536,
    "num_hidden_layers": 28,
    "num_attention_heads": 12,
    "num_key_value_heads": 2,
    "intermediate_size": 8960,
    "vocab_size": 151_936,
    "tie_word_embeddings": True,
    "max_position_embeddings": 32768,
}
"""Qwen2.5-1.5B-Instruct's config.json, the fields that size the update."""


def _model(dtype: torch.dtype) -> Any:
    config = Qwen2Config(**SHAPE, use_cache=False)
    config._attn_implementation = "sdpa"
    model = AutoModelForCausalLM.from_config(config, dtype=dtype)  # no .to(): fake parameters cannot be swapped
    model.train()
    return model


def _inputs(rows: int, prompt: int, response: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    ids = torch.randint(0, SHAPE["vocab_size"], (rows, prompt + response))
    attention = torch.ones_like(ids)
    mask = torch.zeros(rows, prompt + response - 1)
    mask[:, prompt - 1 :] = 1.0
    return ids, attention, mask


def clipped_loss(log_probs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """PPO's clipped surrogate, token mean (TRL's dapo; rllm's ``vanilla``): the same ``[rows, tokens]`` tensors on
    every side. rllm's registered loss reads its metrics with ``.item()``, which fake tensors cannot answer."""
    ratio = torch.exp(log_probs - log_probs.detach())
    clipped = torch.clamp(ratio, 1 - 0.2, 1 + 0.2)
    per_token = -torch.min(ratio * advantages, clipped * advantages)
    return (per_token * mask).sum() / mask.sum().clamp(min=1.0)


def rllm_update(rows: int, prompt: int, response: int) -> Callable[[], tuple[Any, Any, Callable[[], None]]]:
    from omegaconf import OmegaConf

    from rllm_transformers.logprobs import score_tokens
    from rllm_transformers.precision import precision_of

    def build() -> tuple[Any, Any, Callable[[], None]]:
        model = _model(torch.float32)
        precision_of(OmegaConf.create({"precision": "bf16-mixed"})).prepare(model, torch.device("cpu"))
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
        ids, attention, mask = _inputs(rows, prompt, response)
        advantages = torch.randn(rows, 1)

        def step() -> None:
            scores = score_tokens(model, ids, attention, prompt - 1, entropy=True)
            loss = clipped_loss(scores.log_probs, advantages, mask)
            loss.backward()

        return model, optimizer, step

    return build


def trl_update(rows: int, prompt: int, response: int) -> Callable[[], tuple[Any, Any, Callable[[], None]]]:
    from trl.trainer.utils import add_fused_lm_head

    def build() -> tuple[Any, Any, Callable[[], None]]:
        model = _model(torch.float32)  # a model given as an instance keeps its float32 weights; bf16=True autocasts
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        add_fused_lm_head(model, temperature=1.0, cast_lm_head_to_fp32=False, outputs=("log_probs", "entropy"))
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
        ids, attention, _ = _inputs(rows, prompt, response)
        completion_mask = attention[:, prompt:].float()
        advantages = torch.randn(rows, 1)

        def step() -> None:
            labels = ids.masked_fill(attention == 0, -100)
            labels[:, :-response] = -100
            with torch.autocast("cpu", dtype=torch.bfloat16):
                out = model(input_ids=ids, attention_mask=attention, labels=labels, fused_lm_head=True)
            loss = clipped_loss(out.log_probs[:, -response:], advantages, completion_mask)
            loss.backward()

        return model, optimizer, step

    return build


def rllm_before(rows: int, prompt: int, response: int) -> Callable[[], tuple[Any, Any, Callable[[], None]]]:
    def build() -> tuple[Any, Any, Callable[[], None]]:
        model = _model(torch.bfloat16)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
        ids, attention, mask = _inputs(rows, prompt, response)
        advantages = torch.randn(rows, 1)

        def step() -> None:
            kept = ids.shape[1] - (prompt - 1)
            logits = model(input_ids=ids, attention_mask=attention, logits_to_keep=kept).logits[:, :-1].float()
            log_p = torch.log_softmax(logits, dim=-1)
            chosen = log_p.gather(-1, ids[:, prompt:, None]).squeeze(-1)
            p = log_p.exp()
            entropy = -(p * log_p).sum(-1)
            with torch.no_grad():
                (p.detach() ** 2).sum(-1)
            loss = clipped_loss(chosen, advantages, mask[:, prompt - 1 :])
            (loss + 0.0 * entropy.detach().sum()).backward()

        return model, optimizer, step

    return build


FSDP_KEPT = (
    "weights (shard)",
    "gradients (shard)",
    "AdamW state (shard)",
    "whole model (rollouts, old log-probs)",
    "reference policy",
    "checkpoint's optimizer, kept",
)
"""What a rank holds throughout (the optimizer gathered for a checkpoint was kept on every rank until the next)."""
FSDP_PASSING = ("gather after the update", "FSDP's unit gathers")
"""What a rank holds for a moment, one at a time: the peak is the kept tensors plus the largest of these."""
FSDP_LAYOUTS = ("before", "now", "mixed", "served")
"""The columns per world size (:func:`fsdp_layouts`)."""


def fsdp_rank_bytes(world: int) -> dict[str, int]:
    """What FSDP puts on rank 0 of ``world`` (the largest share: FSDP pads the last rows): the model of
    :data:`SHAPE` on the meta device, prepared in ``bf16-mixed`` and sharded by
    :func:`rllm_transformers.sharding.shard_by_layer` with :func:`rllm_transformers.sharding.mixed_policy` (the
    trainer's cut and policy) over a fake process group of ``world`` ranks; the bytes are the shards' and units' real
    sizes, a unit's gathered in float32 (no policy) and in the policy's dtype."""
    import torch.distributed as dist
    from omegaconf import OmegaConf
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from rllm_transformers.precision import precision_of
    from rllm_transformers.sharding import mixed_policy, shard_by_layer

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
    try:
        with torch.device("meta"):
            model = _model(torch.float32)
        precision_of(OmegaConf.create({"precision": "bf16-mixed"})).prepare(model, torch.device("meta"))
        policy = mixed_policy(model)
        whole = sum(p.numel() * p.element_size() for p in model.parameters())
        largest = max(p.numel() * p.element_size() for p in model.parameters())
        shard_by_layer(model, policy)
        local = sum(p.to_local().numel() * p.element_size() for p in model.parameters())
        layers = [m for m in model.modules() if hasattr(m, "unshard") and m is not model]
        in_layers = {id(p) for m in layers for p in m.parameters()}
        root = sum(p.numel() for p in model.parameters() if id(p) not in in_layers)
        layer = max(sum(p.numel() for p in m.parameters()) for m in layers)
        gathered = {
            dtype: root * dtype.itemsize + 2 * layer * dtype.itemsize for dtype in (torch.float32, policy.param_dtype)
        }
    finally:
        dist.destroy_process_group()
    return {
        "whole": whole,
        "local": local,
        "largest": largest,
        "units": gathered[torch.float32],
        "units_mixed": gathered[policy.param_dtype],
    }


def fsdp_layouts(sizes: dict[str, int]) -> dict[str, dict[str, int]]:
    """Rank 0's tensors (:data:`FSDP_KEPT`, :data:`FSDP_PASSING`) in four layouts of one FSDP run with a reference
    (a KL term), after its first checkpoint. FSDP's passing gathers: the root unit (embeddings, final norm, head) stays
    gathered through the forward and the backward (FSDP2 does not reshard the root after the forward), beside one
    decoder layer and the next one prefetched.

    - **before**: a whole reference copy, the whole weights gathered as one state dict after each update, and the
      checkpoint's whole AdamW state gathered on every rank's device and kept there until the next checkpoint;
    - **now**: the reference sharded like the trained copy, the weights gathered into the model a tensor at a time,
      the checkpoint's optimizer into rank 0's host memory (not the device), the units gathered in float32;
    - **mixed**: now with ``bf16-mixed``'s FSDP policy: the units gathered in bfloat16 (half the bytes);
    - **served**: mixed with rollouts from servers (what rllm does then): stage 5 scores with the sharded copies and
      the update's end gathers the weights a tensor at a time into rank 0's host memory, so no rank's device keeps a
      whole model (rank 0's host memory does).
    """
    whole, local, largest = sizes["whole"], sizes["local"], sizes["largest"]
    trained = {"weights (shard)": local, "gradients (shard)": local, "AdamW state (shard)": 2 * local}
    now = {
        **trained,
        "whole model (rollouts, old log-probs)": whole,
        "reference policy": local,
        "gather after the update": largest,
        "FSDP's unit gathers": sizes["units"],
    }
    return {
        "before": {
            **trained,
            "whole model (rollouts, old log-probs)": whole,
            "reference policy": whole,
            "checkpoint's optimizer, kept": 2 * whole,
            "gather after the update": whole,
            "FSDP's unit gathers": sizes["units"],
        },
        "now": now,
        "mixed": {**now, "FSDP's unit gathers": sizes["units_mixed"]},
        "served": {
            **trained,
            "reference policy": local,
            "gather after the update": largest,
            "FSDP's unit gathers": sizes["units_mixed"],
        },
    }


def fsdp_peak(layout: dict[str, int]) -> int:
    """The kept tensors plus the largest passing one."""
    return sum(layout.get(k, 0) for k in FSDP_KEPT) + max(layout.get(k, 0) for k in FSDP_PASSING)


def fsdp_table(worlds: list[int]) -> None:
    """Rank 0's bytes per layout at each world size, and the ratio before / now, printed."""
    print(
        "\nFSDP (strategy=fsdp) with a reference policy, per rank after the first checkpoint: float32 weights and "
        "AdamW (bf16-mixed's), before activations (the rank's micro-batch's, the same in every layout). Sharded sizes "
        "from fully_shard on the meta device over a fake process group of N ranks; 'mixed': bf16-mixed's FSDP policy "
        "(units gathered in bfloat16)."
    )
    layouts = {world: fsdp_layouts(fsdp_rank_bytes(world)) for world in worlds}
    header = "".join(f"{f'{w} ranks ' + name:>18}" for w in worlds for name in FSDP_LAYOUTS)
    print(f"{'GiB on rank 0':<40}{header}")
    for item in (*FSDP_KEPT, *FSDP_PASSING):
        cells = "".join(f"{layouts[w][name].get(item, 0) / GIB:18.2f}" for w in worlds for name in FSDP_LAYOUTS)
        print(f"{item + (' (passing)' if item in FSDP_PASSING else ''):<40}{cells}")
    for world, layout in layouts.items():
        before, now, mixed, served = (fsdp_peak(layout[name]) for name in FSDP_LAYOUTS)
        print(
            f"{world} ranks: peak per rank before {before / GIB:6.2f} GiB, now {now / GIB:6.2f} GiB "
            f"({before / now:.2f}x less), mixed {mixed / GIB:6.2f} GiB ({before / mixed:.2f}x less); served "
            f"{served / GIB:6.2f} GiB ({before / served:.2f}x less; rank 0's host memory keeps the whole model)"
        )


class GlobalPeak(MemTracker):
    """MemTracker keeping the process's peak only: its per-module peaks walk every module on every op (minutes)."""

    def _update_peak_stats(self, peak_state: Any) -> None:
        for device, snapshot in self._curr_mem_snap.items():
            if self._peak_mem.get(device, 0) < snapshot["Total"]:
                self._peak_mem[device] = snapshot["Total"]
                self._peak_mem_snap[device] = dict(snapshot)


def peak(build: Callable[[], tuple[Any, Any, Callable[[], None]]]) -> tuple[dict[str, int], dict[str, int]]:
    """The peak bytes by kind (``Total`` among them) of the forward and backward, and of the whole update (with
    gradient clipping and the AdamW step); the tensors fake."""
    with FakeTensorMode(allow_non_fake_inputs=False):
        model, optimizer, forward_backward = build()
        tracker = GlobalPeak()
        tracker.track_external(model, optimizer)
        with tracker:
            forward_backward()
            passes = tracker.get_tracker_snapshot("peak")
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
        whole = tracker.get_tracker_snapshot("peak")
    del model, optimizer, forward_backward
    gc.collect()
    return _kinds(passes), _kinds(whole)


def _kinds(snapshot: dict[Any, dict[Any, int]]) -> dict[str, int]:
    return {getattr(kind, "value", str(kind)): int(value) for kind, value in next(iter(snapshot.values())).items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--prompt", type=int, default=512)
    parser.add_argument("--response", type=int, default=1536)
    parser.add_argument("--ranks", type=int, nargs="*", default=[2, 4, 8], help="FSDP world sizes (none: skip)")
    parser.add_argument("--fsdp-only", action="store_true", help="only the FSDP per-rank table (seconds)")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    if args.fsdp_only:
        fsdp_table(args.ranks)
        return
    shape = (args.rows, args.prompt, args.response)
    print(
        f"One update of the Qwen2.5-1.5B shape ({SHAPE['num_hidden_layers']} layers, hidden {SHAPE['hidden_size']}, "
        f"vocabulary {SHAPE['vocab_size']:,}), {args.rows} rows x {args.prompt + args.response:,} tokens "
        f"({args.prompt} prompt + {args.response} response); FakeTensorMode + MemTracker, nothing allocated."
    )
    print(
        "MemTracker counts tensors the dispatcher sees: not the CUDA caching allocator's fragmentation, kernels' "
        "workspaces (cuBLAS, flash attention) or the CUDA context (~0.5-1 GiB). The attention is sdpa's CPU kernel "
        "under fake tensors (on a GPU, flash attention's, of the same order)."
    )
    results: dict[str, tuple[dict[str, int], dict[str, int]]] = {}
    sides = {
        "rllm (bf16-mixed, checkpointing)": rllm_update,
        "TRL 1.16 GRPOTrainer recipe": trl_update,
        "rllm before (dtype=bfloat16, whole log-softmax)": rllm_before,
    }
    for name, make in sides.items():
        started = time.perf_counter()
        try:
            results[name] = peak(make(*shape))
        except Exception as exc:  # a side MemTracker or fake tensors cannot follow: said, not hidden
            print(f"{name}: not measured ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})")
            continue
        passes, whole = results[name]
        kinds = ", ".join(f"{k} {v / GIB:.2f}" for k, v in passes.items() if k != "Total" and v >= GIB / 100)
        seconds = time.perf_counter() - started
        print(
            f"{name:<48} forward+backward {passes['Total'] / GIB:6.2f} GiB ({kinds}); "
            f"with the AdamW step {whole['Total'] / GIB:6.2f} GiB  [{seconds:.0f} s]"
        )
    ours, theirs = results.get("rllm (bf16-mixed, checkpointing)"), results.get("TRL 1.16 GRPOTrainer recipe")
    if ours and theirs:
        ratios = [ours[i]["Total"] / theirs[i]["Total"] for i in (0, 1)]
        print(f"rllm / TRL peak: forward+backward {ratios[0]:.3f}x, whole update {ratios[1]:.3f}x (goal <= 1.0x)")
    if args.ranks:
        fsdp_table(args.ranks)


if __name__ == "__main__":
    main()
