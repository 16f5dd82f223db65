"""Benchmark row: each built-in policy loss's forward + backward against verl's function (CPU, float32).

Both sides get the same tensors (a right-padded ragged batch with ratios up to e^±3) and run
one after the other; the ratio rllm / verl is the median of paired rounds, because this
machine's speed drifts. Needs torch and verl (``pip install torch==2.13.0+cpu 'rllm[verl]'``).

    python bench/losses.py            # 512 x 1,024 tokens, a few rounds
    python bench/losses.py --full     # 4,096 x 1,024 tokens (the issue's size; minutes on 2 cores)
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

SHARED = ["vanilla", "dppo_tv", "dppo_kl", "gspo", "sapo", "gpg", "clip_cov", "kl_cov", "geo_mean", "dro", "cispo"]
PINNED = {"sapo": "seq-mean-token-mean", "geo_mean": "seq-mean-token-mean"}
TARGET = 1.1
"""Goal: rllm's loss within 10% of verl's own."""


def make_batch(rows: int, width: int) -> dict[str, Any]:
    import torch

    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, width + 1, (rows,), generator=g)
    mask = (torch.arange(width)[None, :] < lengths[:, None]).float()
    old = -torch.rand(rows, width, generator=g) * 3.0
    logp = torch.clamp(old + (torch.rand(rows, width, generator=g) - 0.5) * 6.0, max=-1e-3)
    return {"old": old, "logp": logp, "adv": torch.randn(rows, width, generator=g), "mask": mask}


def verl_config() -> Any:
    from verl.workers.config.actor import ActorConfig, PolicyLossConfig

    return ActorConfig(
        strategy="fsdp",
        ppo_mini_batch_size=4,
        ppo_micro_batch_size_per_gpu=1,
        rollout_n=1,
        policy_loss=PolicyLossConfig(dro_beta=0.1),
    )


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def row(name: str, data: dict[str, Any], rounds: int, config: Any) -> tuple[float, float, float]:
    """(rllm seconds, verl seconds, median paired ratio) for one loss's forward + backward."""
    import torch
    from verl.trainer.ppo.core_algos import get_policy_loss_fn

    from rllm.losses import LossContext, get_loss, resolve_loss_options

    mode = PINNED.get(name, "token-mean")
    theirs = get_policy_loss_fn(name)
    _, options, mode = resolve_loss_options(name, {"dro_beta": 0.1} if name == "dro" else {}, mode)
    mine = get_loss(name)

    def run_verl() -> None:
        logp = data["logp"].clone().requires_grad_(True)
        torch.manual_seed(0)
        theirs(data["old"], logp, data["adv"], data["mask"], mode, config)[0].backward()

    def run_rllm() -> None:
        logp = data["logp"].clone().requires_grad_(True)
        torch.manual_seed(0)
        ctx = LossContext(logp, data["old"], data["adv"], data["mask"], options=options, agg_mode=mode, name=name)
        mine(ctx)[0].backward()

    run_verl(), run_rllm()  # warm-up
    ratios, ours, verl = [], [], []
    for i in range(rounds):
        pair = (run_rllm, run_verl) if i % 2 == 0 else (run_verl, run_rllm)
        first, second = timed(pair[0]), timed(pair[1])
        mine_s, verl_s = (first, second) if i % 2 == 0 else (second, first)
        ours.append(mine_s), verl.append(verl_s), ratios.append(mine_s / verl_s)
    return statistics.median(ours), statistics.median(verl), statistics.median(ratios)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--full", action="store_true", help="4,096 x 1,024 tokens instead of 512 x 1,024")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    rows = 4096 if args.full else 512
    data = make_batch(rows, 1024)
    config = verl_config()
    print(f"policy losses, forward+backward, {rows} x 1024 tokens, float32, 1 thread, median of {args.rounds} pairs")
    print(f"{'loss':<10} {'rllm ms':>9} {'verl ms':>9} {'ratio':>7}")
    for name in SHARED:
        mine, theirs, ratio = row(name, data, args.rounds, config)
        flag = "" if ratio <= TARGET else f"  (over the {TARGET}x goal)"
        print(f"{name:<10} {mine * 1e3:9.1f} {theirs * 1e3:9.1f} {ratio:7.2f}{flag}")


if __name__ == "__main__":
    main()
