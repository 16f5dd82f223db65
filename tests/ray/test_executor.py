"""The Ray executor against the local one: same episodes and metrics, failures under each policy, a killed worker."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from extras import skip_module_without

skip_module_without("ray", install="pip install 'rllm[ray]' (CI does)")

import ray

from rllm.engine import RolloutEngine
from rllm.errors import ConfigError, RLLMWarning, TrainerError, WorkflowError
from rllm.trainer.engine import WorkflowEngine
from rllm.trainer.ray_executor import RayExecutor, start_local_ray
from rllm.types import Episode, Step, TerminationReason, Trajectory
from rllm.workflows.workflow import Workflow

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import this test module


@pytest.fixture(scope="module", autouse=True)
def _local_ray() -> Iterator[None]:
    start_local_ray(num_cpus=2)
    yield
    ray.shutdown()


class Env(Workflow):
    """An environment call of ``task['sleep']`` seconds, then a reward drawn from the episode's seed.

    ``task['kind']``: ``ok``; ``raise`` (always); ``hang`` (never returns).
    """

    async def run(self, task: dict[str, Any], uid: str, **kwargs: Any) -> Episode:
        if task["kind"] == "raise":
            raise RuntimeError(f"tool server refused {uid}")
        if task["kind"] == "hang":
            await asyncio.Event().wait()
        await asyncio.sleep(task.get("sleep", 0.0))
        reward = float(np.random.default_rng(self.seed).random())
        step = Step(prompt_ids=[1], response_ids=[2], reward=reward, done=True)
        return Episode(
            termination_reason=TerminationReason.ENV_DONE,
            is_correct=reward > 0.5,
            trajectories=[Trajectory(name="solver", steps=[step])],
            metrics={"pid": os.getpid()},
        )


def _tasks(kinds: list[str], repeats: int, sleep: float = 0.0) -> tuple[list[dict[str, Any]], list[str]]:
    tasks = [{"uid": f"t{i}", "kind": kind, "sleep": sleep} for i, kind in enumerate(kinds) for _ in range(repeats)]
    return tasks, [task["uid"] for task in tasks]


def _run(engine: WorkflowEngine, tasks: list[dict[str, Any]], ids: list[str]) -> list[Episode]:
    async def go() -> list[Episode]:
        try:
            return await engine.execute_tasks(tasks, ids)
        finally:
            engine.shutdown()

    return asyncio.run(go())


def _rewards(episodes: list[Episode]) -> dict[str, float]:
    return {ep.id: ep.trajectories[0].steps[0].reward for ep in episodes}  # type: ignore[misc]


def test_same_episodes_as_the_local_executor_in_the_workers() -> None:
    tasks, ids = _tasks(["ok"] * 6, repeats=4)
    local = _run(WorkflowEngine(Env, seed=3), tasks, ids)
    remote = _run(WorkflowEngine(Env, seed=3, executor=RayExecutor(2)), tasks, ids)
    assert [ep.id for ep in remote] == [ep.id for ep in local] == [f"t{i}:{k}" for i in range(6) for k in range(4)]
    assert _rewards(remote) == _rewards(local)
    pids = {ep.metrics["pid"] for ep in remote}
    assert os.getpid() not in pids and len(pids) == 2  # both workers ran episodes, none ran in the driver


@pytest.mark.parametrize("policy", ["retry", "drop_group", "fail"])
def test_a_workflow_raising_on_one_task_under_each_policy(policy: str) -> None:
    tasks, ids = _tasks(["ok", "raise", "ok"], repeats=2)
    engine = WorkflowEngine(Env, executor=RayExecutor(2), failure_policy=policy, retry_limit=1)
    if policy == "drop_group":
        episodes = _run(engine, tasks, ids)
        assert [ep.id for ep in episodes] == ["t0:0", "t0:1", "t2:0", "t2:1"]
        assert (engine.stats.dropped_groups, engine.stats.dropped_rollouts, engine.stats.errors) == (1, 2, 2)
        assert engine.stats.retries == 0
        return
    with pytest.raises(WorkflowError) as caught:
        _run(engine, tasks, ids)
    attempts = 2 if policy == "retry" else 1
    message = str(caught.value)
    assert "on task 't1' (episode 't1:" in message and f"after {attempts} attempt(s)" in message
    assert "RuntimeError: tool server refused t1:" in message and "\n" not in message
    assert "in run" in caught.value.details  # the worker's traceback


def test_timeout_stops_the_rollout_in_the_worker_and_is_not_retried() -> None:
    tasks, ids = _tasks(["hang", "ok"], repeats=2)
    engine = WorkflowEngine(Env, executor=RayExecutor(2), timeout=3.0, retry_limit=2)
    episodes = _run(engine, tasks, ids)
    assert [ep.termination_reason for ep in episodes] == [TerminationReason.TIMEOUT] * 2 + [
        TerminationReason.ENV_DONE
    ] * 2
    assert engine.stats.timeouts == 2 and engine.stats.attempts == 4


def _kill_a_worker_mid_batch(engine: WorkflowEngine, tasks: list[dict[str, Any]], ids: list[str]) -> list[Episode]:
    """Run the batch; once every rollout is under way, SIGKILL worker 0's process."""
    executor = engine.executor
    assert isinstance(executor, RayExecutor)

    async def go() -> list[Episode]:
        await engine.initialize_pool()
        pid = await executor.workers[0].pid.remote()
        batch = asyncio.ensure_future(engine.execute_tasks(tasks, ids))
        await asyncio.sleep(0.5)  # the rollouts sleep 1.5 s: all of them are running now
        os.kill(pid, signal.SIGKILL)
        try:
            return await batch
        finally:
            engine.shutdown()

    return asyncio.run(go())


@pytest.mark.slow
def test_killed_worker_with_retry_loses_and_duplicates_nothing() -> None:
    tasks, ids = _tasks(["ok"] * 4, repeats=2, sleep=1.5)
    reference = _run(WorkflowEngine(Env, seed=1), tasks, ids)
    engine = WorkflowEngine(Env, seed=1, executor=RayExecutor(2), n_parallel_tasks=4, retry_limit=2, timeout=60)
    episodes = _kill_a_worker_mid_batch(engine, tasks, ids)
    assert [ep.id for ep in episodes] == [ep.id for ep in reference]  # every episode once, in order
    assert _rewards(episodes) == _rewards(reference)  # the re-run episodes are the ones they would have been
    # 4 rollouts were running, 2 of them on the killed worker; the later ones ran on its new process
    assert engine.stats.retries == 2 and engine.stats.errors == 0 and engine.stats.attempts == 10
    assert sorted(ep.id for ep in episodes if ep.info["attempts"] == 2) == ["t0:0", "t1:0"]


@pytest.mark.slow
def test_killed_worker_with_drop_group_leaves_its_groups_out_and_counts_them() -> None:
    tasks, ids = _tasks(["ok"] * 4, repeats=2, sleep=1.5)
    engine = WorkflowEngine(Env, executor=RayExecutor(2), n_parallel_tasks=4, failure_policy="drop_group", timeout=60)
    episodes = _kill_a_worker_mid_batch(engine, tasks, ids)
    # t0 and t1 were running, one rollout of each on the killed worker: both groups are left out, whole
    assert [ep.id for ep in episodes] == ["t2:0", "t2:1", "t3:0", "t3:1"]
    assert engine.stats.errors == 2 and engine.stats.dropped_groups == 2 and engine.stats.dropped_rollouts == 4


def test_training_gives_the_same_metrics_with_the_ray_executor(tmp_path) -> None:
    """Two steps of the embedded backend (its policy sent to the workers each batch), fixed seed."""
    from rllm.config import load_config
    from rllm.experimental.unified_trainer import UnifiedTrainer
    from rllm.trainer.logging import METRICS_FILE, read_metrics

    executors: list[str] = []

    def train(executor: str) -> list[dict[str, Any]]:
        out = tmp_path / executor
        config = load_config(
            overrides=[
                f"rllm.trainer.output_dir={out}",
                "rllm.trainer.logger=[jsonl]",
                "rllm.trainer.total_batches=3",
                "rllm.trainer.test_freq=2",
                "rllm.workflow.seed=11",
                f"rllm.workflow.executor={executor}",
            ]
        )
        trainer = UnifiedTrainer(None, config, progress=False)
        executors.append(type(trainer.agent_workflow_engine.executor).__name__)
        try:
            trainer.fit()
        finally:
            trainer.shutdown()
        return [
            {k: v for k, v in record.items() if not k.startswith("time/") and k != "wall_time"}
            for record in read_metrics(out / METRICS_FILE)
        ]

    local, remote = train("local"), train("ray")
    assert executors == ["LocalExecutor", "RayExecutor"]
    assert [r["kind"] for r in local] == ["val", "train", "train", "val", "train", "val"]
    assert remote == local
    assert local[1]["batch/num_episodes"] == 160 and local[1]["actor/loss"] != 0


def test_an_engine_that_cannot_reach_the_workers_stops_the_run_before_any_rollout() -> None:
    import threading

    from rllm.errors import TrainerError

    class LockedEngine(RolloutEngine):
        def __init__(self) -> None:
            self.lock = threading.Lock()  # cannot be pickled

    tasks, ids = _tasks(["ok"], repeats=2)
    engine = WorkflowEngine(Env, rollout_engine=LockedEngine(), executor=RayExecutor(2))
    with pytest.raises(TrainerError, match=r"rollout engine LockedEngine .*cannot be sent to Ray workers.*for_workers"):
        _run(engine, tasks, ids)
    assert engine.stats.attempts == 0


def test_for_workers_is_what_the_workers_get() -> None:
    class Handle(RolloutEngine):
        label = "from for_workers"

    class ServerEngine(RolloutEngine):
        def __init__(self) -> None:
            import threading

            self.lock = threading.Lock()  # the engine itself stays in the driver

        def for_workers(self) -> Handle:
            return Handle()

    class Reads(Workflow):
        async def run(self, task: dict[str, Any], uid: str, **kwargs: Any) -> Episode:
            return Episode(termination_reason=TerminationReason.ENV_DONE, metrics={"label": self.rollout_engine.label})

    engine = WorkflowEngine(Reads, rollout_engine=ServerEngine(), executor=RayExecutor(2))
    episodes = _run(engine, [{"uid": "a"}, {"uid": "b"}], ["a", "b"])
    assert [ep.metrics["label"] for ep in episodes] == ["from for_workers"] * 2


def test_import_rllm_and_the_executor_module_import_no_ray() -> None:
    import subprocess

    code = (
        "import sys, rllm, rllm.trainer.unified, rllm.trainer.ray_executor\n"
        "from rllm.config import load_config\n"
        "load_config(overrides=['rllm.workflow.executor=ray'])\n"
        "print('ray' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


@pytest.mark.parametrize(
    ("options", "culprit"),
    [({"num_workers": 0}, "num_workers must be at least 1"), ({"resources": {"sandbox": -1}}, "'sandbox'")],
)
def test_bad_ray_settings_are_refused_naming_the_key(options: dict[str, Any], culprit: str) -> None:
    from rllm.errors import ConfigError

    with pytest.raises(ConfigError, match=culprit):
        RayExecutor(**options)  # type: ignore[arg-type]


def test_a_local_instance_listens_on_the_loopback_address_only() -> None:
    (node,) = ray.nodes()
    assert node["NodeManagerAddress"] == "127.0.0.1"
    assert ray.get_runtime_context().gcs_address.startswith("127.0.0.1:")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"resources": {"sandbox": 1}},
            r"reserves rllm\.workflow\.ray\.resources\.sandbox=1, .*has 2 CPU, no 'sandbox'\)",
        ),
        ({"num_gpus": 1}, r"reserves rllm\.workflow\.ray\.num_gpus=1, .*has 2 CPU, 0 GPU\)"),
        ({"num_cpus": 64}, r"reserves rllm\.workflow\.ray\.num_cpus=64, but no node .*has 2 CPU\)"),
    ],
)
def test_workers_the_cluster_cannot_place_are_refused_naming_the_resource(options: dict, message: str) -> None:
    tasks, ids = _tasks(["ok"], repeats=2)
    engine = WorkflowEngine(Env, executor=RayExecutor(2, **options), timeout=5.0)
    started = time.monotonic()
    with pytest.raises(ConfigError, match=message) as caught:
        _run(engine, tasks, ids)
    assert "\n" not in str(caught.value) and time.monotonic() - started < 5
    assert engine.stats.attempts == 0


def test_more_workers_than_the_cluster_holds_start_as_many_as_fit_and_no_episode_waits() -> None:
    """The documented num_workers=4 on 2 CPUs: two workers start, and every episode is sent to one of them."""
    tasks, ids = _tasks(["ok"] * 4, repeats=2)
    engine = WorkflowEngine(Env, executor=RayExecutor(4), timeout=8.0)
    warning = r"num_workers=4: the cluster holds 2 workers of rllm\.workflow\.ray\.num_cpus=1 \(it has 2 CPU\), so 2"
    with pytest.warns(RLLMWarning, match=warning):
        episodes = _run(engine, tasks, ids)
    assert engine.stats.timeouts == 0
    assert [ep.termination_reason for ep in episodes] == [TerminationReason.ENV_DONE] * 8
    assert len({ep.metrics["pid"] for ep in episodes}) == 2


@ray.remote(num_cpus=2)
class _Hog:
    """Holds both CPUs of the test instance."""

    def ping(self) -> int:
        return 1


def test_workers_that_do_not_start_in_time_are_an_error_saying_what_is_free() -> None:
    hog = _Hog.remote()  # type: ignore[attr-defined]
    ray.get(hog.ping.remote())
    try:
        executor = RayExecutor(1, start_timeout=1.0)
        engine = WorkflowEngine(Env, executor=executor)
        message = (
            r"1 of 1 Ray workers did not start within rllm\.workflow\.ray\.start_timeout=1 s: each reserves "
            r"rllm\.workflow\.ray\.num_cpus=1 and the cluster has 0 CPU free"
        )
        with pytest.raises(TrainerError, match=message):
            _run(engine, *_tasks(["ok"], repeats=1))
        assert executor.workers == []  # the pending worker was not left waiting for the CPUs
    finally:
        ray.kill(hog)


def test_an_address_nothing_answers_at_is_one_line_from_rllm_train(tmp_path) -> None:
    with socket.socket() as probe:  # a loopback port that was free a moment ago: nothing listens there
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "rllm.cli.main",
            "train",
            "rllm.workflow.executor=ray",
            f"rllm.workflow.ray.address=127.0.0.1:{port}",
            "rllm.workflow.ray.start_timeout=2",
            "rllm.trainer.logger=[jsonl]",
            f"rllm.trainer.output_dir={tmp_path / 'run'}",
        ],
        capture_output=True,
        text=True,
        timeout=90,
        env={**os.environ, "RLLM_DISABLED_PLUGINS": "fast"},
    )
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode != 0
    assert len(lines) == 1, done.stderr
    assert f"rllm.workflow.ray.address='127.0.0.1:{port}': nothing answers there within 2 s" in lines[0]
