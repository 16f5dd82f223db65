"""Benchmark rows for the verl bridge (needs verl: ``pip install torch==2.13.0 'rllm[verl]'``).

1. The bridge's overhead: verl's call of ``rllm.grpo`` (token rewards summed over the mask,
   labels, pipeline, advantages broadcast back) over rllm's own ``compute_advantages("grpo")`` on
   the same 131,072 responses.
2. rllm against verl's own ``grpo_vectorized`` and ``rloo_vectorized`` (torch, CPU) on the same
   1,048,576 responses, rllm on its numpy path (default install) and its compiled path
   (the fast plugin, ``rllm[fast]``), with rllm's default numerics and with ``preset="verl"`` (float32, unbiased std).

Every ratio is the median of paired runs measured in this run, one side right after the other,
because this machine's speed drifts. ``python bench/verl_bridge.py [--quick]`` runs it alone
(a file named verl.py would shadow verl itself); ``bench/run.py`` calls :func:`verl_rows` when
verl is installed.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import time
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import numpy as np

import rllm
from rllm.toolkit import kernel, numpy_only

BRIDGE_SIZE = 131_072
VERL_SIZE = 1_048_576
GROUP = 8
TARGET = 5.0
"""rllm's fast path should be at least this many times faster than verl's vectorized estimators."""


def available() -> bool:
    return importlib.util.find_spec("verl") is not None


def paired(fn: Callable[[], Any], other: Callable[[], Any], rounds: int) -> tuple[float, float, float]:
    """Median of ``other``'s time over ``fn``'s in rounds run back to back; and each side's best time."""
    ratios, best_fn, best_other = [], float("inf"), float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        middle = time.perf_counter()
        other()
        end = time.perf_counter()
        ratios.append((end - middle) / (middle - start))
        best_fn, best_other = min(best_fn, middle - start), min(best_other, end - middle)
    return statistics.median(ratios), best_fn, best_other


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def bridge_overhead(n: int, rounds: int, rng: np.random.Generator) -> None:
    """verl calling rllm.grpo through the bridge against rllm's own call, with verl-like padded responses."""
    import torch
    from omegaconf import OmegaConf
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    bridge, verls = get_adv_estimator_fn("rllm.grpo"), get_adv_estimator_fn("grpo_vectorized")
    config = OmegaConf.create({"norm_adv_by_std_in_grpo": True})
    prompts = np.array([str(uuid.UUID(int=int(i))) for i in rng.integers(0, 2**62, n // GROUP)], dtype=object)
    print(f"\n## verl bridge: rllm.grpo inside verl against rllm.compute_advantages('grpo'), {n:,} responses")
    print("verl's uids are strings (uuid4), groups of 8 in order; response lengths 1..L, right-padded")
    print("verl grpo_vectorized = verl's own estimator on the same tensors (it sums and broadcasts too)")
    print(f"{'tokens L':>9} {'own ms':>8} {'bridge ms':>10} {'bridge/own':>10} {'verl grpo_vectorized ms':>24}")
    for width in (1, 64):
        lengths = rng.integers(1, width + 1, n)
        mask = torch.as_tensor(np.arange(width)[None, :] < lengths[:, None], dtype=torch.int64)
        scores = (rng.random(n) < 0.5).astype(np.float32)
        tokens = torch.zeros(n, width)
        tokens[torch.arange(n), torch.as_tensor(lengths - 1)] = torch.as_tensor(scores)
        uids = np.repeat(prompts, GROUP)

        def own(scores: np.ndarray = scores, uids: np.ndarray = uids) -> Any:
            return rllm.compute_advantages("grpo", scores, uids)

        def through_verl(tokens: Any = tokens, mask: Any = mask, uids: np.ndarray = uids) -> Any:
            return bridge(token_level_rewards=tokens, response_mask=mask, index=uids, config=config)

        got = through_verl()[0][:, 0].numpy()
        if not np.allclose(got, own(), atol=1e-5):
            raise SystemExit("the bridge's GRPO differs from rllm's own call")
        ratio, own_best, bridge_best = paired(own, through_verl, rounds)
        verl_best = min(
            timed(lambda tokens=tokens, mask=mask, uids=uids: verls(tokens, mask, uids)) for _ in range(rounds)
        )
        print(f"{width:9d} {own_best * 1e3:8.2f} {bridge_best * 1e3:10.2f} {ratio:10.2f} {verl_best * 1e3:24.2f}")


def against_verl(n: int, rounds: int, rng: np.random.Generator) -> None:
    """verl's vectorized GRPO and RLOO against rllm's on the same responses (one token each, groups of 8)."""
    import torch
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    rewards = (rng.random(n) < 0.5).astype(np.float32)
    ids = np.repeat(np.arange(n // GROUP), GROUP)
    tokens, mask = torch.as_tensor(rewards).unsqueeze(-1), torch.ones(n, 1)
    paths: dict[str, Callable[[], AbstractContextManager[Any]]] = {"numpy": numpy_only}
    if kernel("group_centre") is not None:
        paths["fast"] = nullcontext
    print(f"\n## rllm against verl's own vectorized estimators, {n:,} responses (groups of 8, in order)")
    print(f"verl: torch {torch.__version__} on {torch.get_num_threads()} threads; rllm path numpy = default install,")
    print("fast = the fast plugin's compiled kernels (numba); verl/rllm = median of paired runs (verl's time / rllm's)")
    print(f"{'verl estimator':<16} {'rllm call':<22} {'path':<6} {'verl ms':>8} {'rllm ms':>8} {'verl/rllm':>9}")
    for verl_name, ours in (("grpo_vectorized", "grpo"), ("rloo_vectorized", "rloo")):
        verl_fn = get_adv_estimator_fn(verl_name)

        def verl_call(verl_fn: Any = verl_fn) -> Any:
            return verl_fn(token_level_rewards=tokens, response_mask=mask, index=ids, config=None)

        reference = verl_call()[0][:, 0].numpy()
        for options in ({}, {"preset": "verl"}):
            call = f"{ours}" + (", preset=verl" if options else "")
            for path, context in paths.items():
                with context():

                    def rllm_call(ours: str = ours, options: dict[str, Any] = options) -> Any:
                        return rllm.compute_advantages(ours, rewards, ids, **options)

                    warm = rllm_call()  # compiles the kernels on the fast path
                    if options and not np.allclose(warm, reference, atol=1e-5):
                        raise SystemExit(f"rllm {call} differs from verl's {verl_name}")
                    ratio, rllm_best, verl_best = paired(rllm_call, verl_call, rounds)
                verdict = "" if path != "fast" else f" ({'meets' if ratio >= TARGET else 'misses'} {TARGET:.0f}x)"
                print(
                    f"{verl_name:<16} {call:<22} {path:<6} {verl_best * 1e3:8.2f} {rllm_best * 1e3:8.2f} "
                    f"{ratio:9.1f}{verdict}"
                )


def verl_rows(quick: bool = False, rng: np.random.Generator | None = None) -> None:
    """Both tables; small sizes with ``quick``."""
    rng = rng if rng is not None else np.random.default_rng(0)
    rounds = 5 if quick else 15
    bridge_overhead(BRIDGE_SIZE // 8 if quick else BRIDGE_SIZE, rounds, rng)
    against_verl(VERL_SIZE // 8 if quick else VERL_SIZE, rounds, rng)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1/8 of the sizes, a few seconds")
    args = parser.parse_args()
    if not available():
        raise SystemExit("verl is not installed: pip install torch==2.13.0 'rllm[verl]'")
    verl_rows(args.quick)


if __name__ == "__main__":
    main()
