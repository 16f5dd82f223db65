"""Advantage-estimation benchmark: vectorized kernels vs a per-group loop vs a plain copy, and collection.

Run ``python bench/run.py`` (about 25 minutes on 2 cores, most of it the training benchmarks that run where
torch and transformers are installed) or ``python bench/run.py --quick`` (20-40 s on 2 cores). Times
are the best of several runs (the per-group loop runs once: it is slow); ratios to the copy are
medians of paired runs, each timed right after a copy, because this machine's speed drifts. With
numba installed (``rllm[fast]``) the kernel table shows the fast plugin's compiled kernels, which
split large batches across threads, next to the toolkit's numpy path on the same data."""

from __future__ import annotations

import argparse
import io
import os
import platform
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext, redirect_stdout
from pathlib import Path
from typing import Any, TextIO

import numpy as np
from agent_flow import agent_flow_benchmark
from agent_flow import available as agent_flow_available
from async_training import async_benchmark
from distributed import available as distributed_available
from distributed import distributed_benchmark
from jsonl import jsonl_benchmark
from openai_engine import available as serve_available
from openai_engine import default_vllm_python, openai_engine_benchmark
from simple_workflow import available as simple_workflow_available
from simple_workflow import simple_workflow_benchmark
from verl_bridge import available as verl_available
from verl_bridge import verl_rows

import rllm
import rllm_fast
from rllm import AlgorithmConfig, Step, Trajectory, TrajectoryGroup
from rllm.estimators.batch import AdvantageBatch
from rllm.estimators.collect import collect_advantages
from rllm.estimators.compute import get_estimator
from rllm.toolkit import kernel, numpy_only, resolve_numerics
from rllm_fast.parts import THREADS_VAR, part_count

ESTIMATORS = ("grpo", "rloo", "reinforce_plus_plus_baseline")
IMPORT_TARGET = 1.25
"""``import rllm`` may take at most this multiple of ``import numpy, pluggy``."""
COLLECT_WRITE_TARGET = 1.5
COLLECT_ARRAYS_TARGET = 0.5
"""Collection (writing every step / arrays only) as a multiple of the bare loop that sets each step's advantage."""
VERL_GRPO_MS = 13.5
"""verl's vectorized GRPO (torch, CPU) on 131,072 responses, measured once on this machine (recorded figure)."""
VERL_SIZE = 131_072
EPS = 1e-6


def best_of(fn: Callable[[], Any], repeat: int) -> float:
    """Best wall time of ``repeat`` runs, in seconds."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


# The per-group loop baseline: group with a dict, then one small numpy computation per group,
# as the documented list-of-arrays API does (and most peers).
def loop_group(group_ids: np.ndarray) -> dict[Any, list[int]]:
    members: dict[Any, list[int]] = defaultdict(list)
    for position, label in enumerate(group_ids.tolist()):
        members[label].append(position)
    return members


def loop_grpo(rewards: np.ndarray, group_ids: np.ndarray) -> np.ndarray:
    out = np.empty_like(rewards)
    for positions in loop_group(group_ids).values():
        r = rewards[positions]
        mean, std = (0.0, 1.0) if len(r) <= 1 else (np.mean(r), np.std(r))
        out[positions] = (r - mean) / (std + EPS)
    return out


def loop_rloo(rewards: np.ndarray, group_ids: np.ndarray) -> np.ndarray:
    out = np.empty_like(rewards)
    for positions in loop_group(group_ids).values():
        r = rewards[positions]
        n = len(r)
        out[positions] = r if n == 1 else r * n / (n - 1) - np.mean(r) * n / (n - 1)
    return out


def loop_reinforce_plus_plus_baseline(rewards: np.ndarray, group_ids: np.ndarray) -> np.ndarray:
    groups = list(loop_group(group_ids).values())
    centred = [rewards[p] - (np.mean(rewards[p]) if len(p) > 1 else 0.0) for p in groups]
    std = np.std(np.concatenate(centred))
    out = np.empty_like(rewards)
    for positions, values in zip(groups, centred, strict=True):
        out[positions] = values / (std + EPS)
    return out


LOOPS = {
    "grpo": loop_grpo,
    "rloo": loop_rloo,
    "reinforce_plus_plus_baseline": loop_reinforce_plus_plus_baseline,
}


def layouts(n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Group ids for n trajectories: groups of 8 and ragged groups of 1..16, in group order and shuffled."""
    eights = np.repeat(np.arange(n // 8), 8)
    sizes = rng.integers(1, 17, n)
    sizes = sizes[: int(np.searchsorted(np.cumsum(sizes), n)) + 1]
    sizes[-1] -= int(sizes.sum()) - n
    ragged = np.repeat(np.arange(len(sizes)), sizes)
    out = {}
    for name, ids in (("groups of 8", eights), ("ragged 1..16", ragged)):
        out[f"{name}, group order"] = ids
        out[f"{name}, shuffled"] = ids[rng.permutation(n)]
    return out


def paired_ratio(fn: Callable[[], Any], floor: Callable[[], Any], rounds: int) -> tuple[float, float]:
    """Median over rounds of ``fn``'s time over the floor's best of 3 measured just before it; and fn's best time.

    The machine's speed drifts (shared cores, memory bandwidth); timing the floor next to each run keeps
    the ratio honest where a floor measured once, minutes apart, would not.
    """
    ratios, best = [], float("inf")
    for _ in range(rounds):
        copy = best_of(floor, 3)
        start = time.perf_counter()
        fn()
        took = time.perf_counter() - start
        ratios.append(took / copy)
        best = min(best, took)
    return statistics.median(ratios), best


def kernels(n: int, repeat: int, rng: np.random.Generator) -> None:
    """One row per layout and estimator: the fast plugin's figures next to the numpy path's, on the same data."""
    rewards = rng.random(n)
    floor = best_of(rewards.copy, repeat * 3)
    paths: dict[str, Callable[[], AbstractContextManager[Any]]] = {"numpy": numpy_only}
    print(f"\n## Kernels on {n:,} trajectories (copy floor: {floor * 1e3:.3f} ms)")
    if kernel("group_centre") is not None:
        paths = {"fast": nullcontext, **paths}
        threads = part_count(n)
        print(
            f"fast = the fast plugin's compiled kernels, {threads} thread{'s' if threads > 1 else ''} "
            f"('1 thread': rllm_fast.threads(1), as {THREADS_VAR}=1; '-': same as fast); "
            "numpy = the toolkit's numpy path (rllm.toolkit.numpy_only())"
        )
    else:
        threads = 1
        print("fast plugin not active (numba not installed, or RLLM_DISABLED_PLUGINS=fast): numpy path only")
    print(
        "ms = rllm.compute_advantages end to end (group layout, checks, kernel), best run; "
        "kernel = on a prepared batch; x/copy = median of paired runs (each timed right after a copy)"
    )
    header = f"{'layout':<28} {'estimator':<30} {'loop ms':>8}"
    if "fast" in paths:
        header += f" | {'fast ms':>8} {'/copy':>6} {'1 thread':>8} {'kernel':>6}"
    header += f" | {'numpy ms':>8} {'/copy':>6} {'kernel':>6} | {'loop/' + next(iter(paths)):>10}"
    print(header)
    for layout_name, ids in layouts(n, rng).items():
        for name in ESTIMATORS:
            target = get_estimator(name).target
            start = time.perf_counter()
            expected = LOOPS[name](rewards, ids)
            loop = time.perf_counter() - start

            def ours_call(name: str = name, ids: np.ndarray = ids) -> Any:
                return rllm.compute_advantages(name, rewards, ids)

            figures: dict[str, tuple[float, float, str, float]] = {}
            for path, context in paths.items():
                with context():
                    if not np.allclose(ours_call(), expected, rtol=1e-9, atol=1e-9):
                        raise SystemExit(f"{name} on {layout_name}, {path} path: differs from the per-group loop")
                    batch = AdvantageBatch(rewards, ids)  # the layout as this path detects it
                    ours_ratio, ours = paired_ratio(ours_call, rewards.copy, repeat)
                    numerics = resolve_numerics(estimator=name)
                    kernel_ratio, _ = paired_ratio(
                        lambda t=target, b=batch, m=numerics: t(b, numerics=m), rewards.copy, repeat
                    )
                    one_thread = "-"  # the same run as fast
                    if path == "fast" and threads > 1:
                        with rllm_fast.threads(1):
                            one_thread = f"{paired_ratio(ours_call, rewards.copy, repeat)[0]:.1f}"
                figures[path] = (ours, ours_ratio, one_thread, kernel_ratio)
            row = f"{layout_name:<28} {name:<30} {loop * 1e3:8.0f}"
            for path, (ours, ours_ratio, one_thread, kernel_ratio) in figures.items():
                row += f" | {ours * 1e3:8.2f} {ours_ratio:6.1f}"
                row += f" {one_thread:>8} {kernel_ratio:6.1f}" if path == "fast" else f" {kernel_ratio:6.1f}"
            print(f"{row} | {loop / next(iter(figures.values()))[0]:10.0f}")


def verl_scale(repeat: int, rng: np.random.Generator) -> None:
    rewards = (rng.random(VERL_SIZE) < 0.5).astype(np.float64)
    ids = np.repeat(np.arange(VERL_SIZE // 8), 8)
    ours = best_of(lambda: rllm.compute_advantages("grpo", rewards, ids), repeat * 3)
    print(f"\n## verl scale: GRPO on {VERL_SIZE:,} responses (groups of 8, group order)")
    print(f"ours: {ours * 1e3:.2f} ms; verl vectorized GRPO (torch, CPU): {VERL_GRPO_MS} ms (recorded external figure)")
    print(f"verl / ours: {VERL_GRPO_MS / 1e3 / ours:.1f}x")


def make_groups(n_groups: int, rng: np.random.Generator) -> list[TrajectoryGroup]:
    rewards = rng.random(n_groups * 8).tolist()
    return [
        TrajectoryGroup.for_task(
            f"task{g}",
            "solver",
            [
                Trajectory(uid=f"{g}-{k}", name="solver", steps=[Step(), Step()], reward=rewards[g * 8 + k])
                for k in range(8)
            ],
        )
        for g in range(n_groups)
    ]


def collection(n_groups: int, repeat: int, rng: np.random.Generator) -> None:
    start = time.perf_counter()
    groups = make_groups(n_groups, rng)
    built = time.perf_counter() - start

    def bare() -> None:
        for group in groups:
            for trajectory in group.trajectories:
                for step in trajectory.steps:
                    step.advantage = 0.5

    def reset() -> None:
        for group in groups:
            for trajectory in group.trajectories:
                for step in trajectory.steps:
                    step.advantage = None

    config = AlgorithmConfig()
    collect_advantages(groups, config)  # the first call loads the plugins (and compiles kernels): not timed
    runs: dict[str, list[float]] = {"bare": [], "write": [], "arrays": []}
    for _ in range(repeat):  # interleaved, so all three see the same machine load
        reset()
        runs["bare"].append(best_of(bare, 1))
        reset()
        runs["write"].append(best_of(lambda: collect_advantages(groups, config), 1))
        runs["arrays"].append(best_of(lambda: collect_advantages(groups, config, write_steps=False), 1))
    print(f"\n## Collection: {n_groups:,} groups x 8 trajectories x 2 steps (built in {built:.1f} s), grpo")
    print(f"bare loop setting every step's advantage: {min(runs['bare']) * 1e3:.0f} ms (best)")
    for label, key, target in (
        ("collect, writing every step", "write", COLLECT_WRITE_TARGET),
        ("collect, arrays only (write_steps=False)", "arrays", COLLECT_ARRAYS_TARGET),
    ):
        paired = statistics.median(c / b for c, b in zip(runs[key], runs["bare"], strict=True))
        verdict = "meets" if paired <= target else "misses"
        print(
            f"{label}: {min(runs[key]) * 1e3:.0f} ms; median of paired runs {paired:.2f}x the bare loop "
            f"({verdict} the {target}x target)"
        )


def import_cost(rounds: int) -> None:
    """``import rllm`` against ``import numpy, pluggy`` in fresh interpreters, paired and interleaved."""

    def fresh(statement: str) -> float:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", statement], check=True)
        return time.perf_counter() - start

    fresh("import rllm")  # warm the file cache
    ratios, base_times, rllm_times = [], [], []
    for _ in range(rounds):
        base, ours = fresh("import numpy, pluggy"), fresh("import rllm")
        ratios.append(ours / base)
        base_times.append(base)
        rllm_times.append(ours)
    paired = statistics.median(ratios)
    verdict = "meets" if paired <= IMPORT_TARGET else "misses"
    first_use = statistics.median(
        fresh("import rllm; rllm.compute_advantages('grpo', [1.0, 0.0], [0, 0])") / fresh("import numpy, pluggy")
        for _ in range(rounds)
    )
    print("\n## Import cost (fresh interpreter, process start included)")
    print(f"import numpy, pluggy: {min(base_times) * 1e3:.0f} ms; import rllm: {min(rllm_times) * 1e3:.0f} ms (best)")
    print(f"import rllm / import numpy, pluggy: median of paired runs {paired:.2f}x ({verdict} the {IMPORT_TARGET}x)")
    print(
        f"import rllm and a first compute_advantages (numpy, the plugins loaded) / import numpy, pluggy: "
        f"{first_use:.2f}x (what a first call waits for; no target)"
    )


DOCS_PAGE = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"


class _Tee(io.TextIOBase):
    """Writes to the terminal and keeps a copy, so the docs page is exactly what the run printed."""

    def __init__(self, out: TextIO) -> None:
        self.out, self.copy = out, io.StringIO()

    def write(self, text: str) -> int:
        self.copy.write(text)
        return self.out.write(text)

    def flush(self) -> None:
        self.out.flush()


def _page(body: str, quick: bool) -> str:
    """docs/benchmarks.md: the run's output under a header saying how and where it was made."""
    command = "python bench/run.py --docs" + (" --quick" if quick else "")
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    machine += f", numpy {np.__version__}"
    return (
        "# Benchmarks\n\n"
        f"<!-- written by `{command}`; do not edit by hand, run it again -->\n\n"
        f"Written by `{command}` on {time.strftime('%Y-%m-%d')} ({machine}). Ratios are against a baseline "
        "timed in the same run, so they travel between machines better than the times do.\n\n"
        "```text\n" + body.strip() + "\n```\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: 20-40 s on 2 cores, not 25 min")
    parser.add_argument("--docs", action="store_true", help=f"also write the figures to {DOCS_PAGE.name} in docs/")
    parser.add_argument(
        "--vllm-python",
        default=default_vllm_python(),
        metavar="PATH",
        help="a python with vLLM, for the HTTP engine table's vLLM row (default: $RLLM_VLLM_PYTHON, or this python)",
    )
    args = parser.parse_args()
    if args.docs:
        tee = _Tee(sys.stdout)
        with redirect_stdout(tee):
            run(args.quick, args.vllm_python)
        DOCS_PAGE.write_text(_page(tee.copy.getvalue(), args.quick), encoding="utf-8")
        print(f"wrote {DOCS_PAGE}")
    else:
        run(args.quick, args.vllm_python)


def run(quick: bool, vllm_python: str | None = None) -> None:
    """Every table, printed as it is measured; ``vllm_python`` (a python with vLLM) adds vLLM's row."""
    n, repeat, n_groups = (65_536, 5, 5_000) if quick else (1_048_576, 15, 100_000)
    kernels(n, repeat, np.random.default_rng(0))
    rng = np.random.default_rng(0)
    verl_scale(repeat, rng)
    collection(n_groups, 3 if quick else 7, rng)
    import_cost(5 if quick else 15)
    jsonl_benchmark(size_mb=5 if quick else 100, rounds=1 if quick else 3)
    if verl_available():
        verl_rows(quick=quick, rng=rng)
    else:
        print("\n## verl: not installed (pip install 'rllm[verl]'): no bridge or verl rows")
    if distributed_available():
        distributed_benchmark(quick=quick)
    else:
        print("\n## torchrun ranks: torch/transformers not installed (pip install 'rllm[transformers]'): no rows")
    if serve_available():
        openai_engine_benchmark(quick=quick, vllm_python=vllm_python)
    else:
        print("\n## HTTP rollout engine: the serve extra is not installed (pip install 'rllm[serve]'): no rows")
    if distributed_available():  # the same extra
        async_benchmark(quick=quick)
    else:
        print(
            "\n## asynchronous training: torch/transformers not installed (pip install 'rllm[transformers]'): no rows"
        )
    if simple_workflow_available():
        print("\n## rLLM's SimpleWorkflow learning text_digit_max (AgentTrainer, transformers backend)")
        simple_workflow_benchmark(*((30, 10) if quick else ()))
    else:
        print("\n## SimpleWorkflow: torch/transformers not installed (pip install 'rllm[transformers]'): no rows")
    if agent_flow_available():
        print("\n## An agent flow trained through the gateway")
        agent_flow_benchmark(quick=quick)
    else:
        print("\n## agent flow: torch, transformers or openai not installed (pip install 'rllm[transformers,test]')")


if __name__ == "__main__":
    main()
