"""Episodes per second of the workflow executors, and what the engine costs per episode.

A workflow whose rollout is one 50 ms environment call (``asyncio.sleep``), 256 episodes
(64 tasks x 4 rollouts), all allowed at once (``n_parallel_tasks=256``):

1. a bare ``asyncio.gather`` of the same 256 coroutines (the floor: no engine at all);
2. the workflow engine with the local executor;
3. the workflow engine with the Ray executor, 2 worker actors on a local Ray instance
   (``start_local_ray(num_cpus=2)``, on 127.0.0.1; start-up is not timed).

Per-episode overhead is (engine time - gather time) / 256. Each figure is the median of
``--rounds`` runs. Needs ray (``pip install 'rllm[ray]'``); ``python bench/ray_executor.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

from rllm.trainer.engine import WorkflowEngine
from rllm.types import Episode, TerminationReason
from rllm.workflows.workflow import Workflow

EPISODES = 256
ROLLOUTS = 4
SLEEP = 0.05


class EnvironmentCall(Workflow):
    """One 50 ms environment call per rollout."""

    async def run(self, task: dict[str, Any], uid: str, **kwargs: Any) -> Episode:
        await asyncio.sleep(SLEEP)
        return Episode(termination_reason=TerminationReason.ENV_DONE, is_correct=True)


def _batch() -> tuple[list[dict[str, Any]], list[str]]:
    ids = [f"task{i // ROLLOUTS}" for i in range(EPISODES)]
    return [{"uid": task_id} for task_id in ids], ids


async def _gather() -> float:
    tasks, _ = _batch()
    start = time.perf_counter()
    await asyncio.gather(*(EnvironmentCall(None).run(task, f"{i}") for i, task in enumerate(tasks)))
    return time.perf_counter() - start


async def _engine(engine: WorkflowEngine) -> float:
    tasks, ids = _batch()
    start = time.perf_counter()
    episodes = await engine.execute_tasks(tasks, ids)
    elapsed = time.perf_counter() - start
    if len(episodes) != EPISODES:
        raise RuntimeError(f"expected {EPISODES} episodes, got {len(episodes)}")
    return elapsed


async def measure(rounds: int) -> dict[str, float]:
    import ray

    from rllm.trainer.ray_executor import RayExecutor, start_local_ray

    start_local_ray(num_cpus=2)
    local = WorkflowEngine(EnvironmentCall, n_parallel_tasks=EPISODES)
    remote = WorkflowEngine(EnvironmentCall, n_parallel_tasks=EPISODES, executor=RayExecutor(2))
    try:
        await local.initialize_pool()
        await remote.initialize_pool()
        await _engine(remote)  # warm-up: the actors' first calls import rllm in their processes
        times: dict[str, list[float]] = {"gather": [], "local": [], "ray": []}
        for _ in range(rounds):
            times["gather"].append(await _gather())
            times["local"].append(await _engine(local))
            times["ray"].append(await _engine(remote))
    finally:
        remote.shutdown()
        ray.shutdown()
    return {name: statistics.median(series) for name, series in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    medians = asyncio.run(measure(args.rounds))
    floor = medians["gather"]
    print(f"{EPISODES} episodes of one {SLEEP * 1000:.0f} ms environment call, median of {args.rounds} rounds")
    print(f"{'executor':<26}{'seconds':>9}{'episodes/s':>12}{'overhead/episode':>18}")
    for name, label in [
        ("gather", "bare asyncio.gather"),
        ("local", "engine, local"),
        ("ray", "engine, Ray (2 workers)"),
    ]:
        seconds = medians[name]
        overhead = "" if name == "gather" else f"{(seconds - floor) / EPISODES * 1e6:.0f} µs"
        print(f"{label:<26}{seconds:>9.3f}{EPISODES / seconds:>12.0f}{overhead:>18}")


if __name__ == "__main__":
    main()
