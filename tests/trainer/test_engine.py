"""The workflow engine under faults: errors retried then reported, hangs timed out, nothing lost."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from rllm.errors import WorkflowError
from rllm.trainer.engine import WorkflowEngine
from rllm.types import Episode, Step, TerminationReason, Trajectory
from rllm.workflows.workflow import Workflow

ATTEMPTS: Counter[str] = Counter()


class FlakyWorkflow(Workflow):
    """Behaves according to the task: ``ok``, ``raise`` always, ``raise_once``, ``hang`` or ``none``."""

    async def run(self, task: dict[str, Any], uid: str, **kwargs: Any) -> Episode | None:
        ATTEMPTS[uid] += 1
        kind = task["kind"]
        if kind == "raise" or (kind == "raise_once" and ATTEMPTS[uid] == 1):
            raise RuntimeError(f"boom in {uid}")
        if kind == "hang":
            await asyncio.Event().wait()
        if kind == "none":
            return None
        await asyncio.sleep(0)
        reward = float(task.get("reward", 1.0))
        step = Step(prompt_ids=[1], response_ids=[2], reward=reward, done=True)
        return Episode(
            termination_reason=TerminationReason.ENV_DONE,
            is_correct=reward > 0,
            trajectories=[Trajectory(name="solver", steps=[step])],
        )


def _engine(**kwargs: Any) -> WorkflowEngine:
    ATTEMPTS.clear()
    options = {"n_parallel_tasks": 4, "retry_limit": 2, "raise_on_error": False, "timeout": 0.2} | kwargs
    return WorkflowEngine(FlakyWorkflow, rollout_engine=None, **options)


def _run(engine: WorkflowEngine, kinds: list[str], repeats: int = 1) -> list[Episode]:
    tasks = [{"kind": kind, "uid": f"t:{i}"} for i, kind in enumerate(kinds) for _ in range(repeats)]
    ids = [task["uid"] for task in tasks]
    return asyncio.run(engine.execute_tasks(tasks, ids))


def test_ids_order_and_counts_with_every_kind_of_fault() -> None:
    kinds = ["ok", "raise", "raise_once", "hang", "none", "ok"]
    engine = _engine()
    episodes = _run(engine, kinds, repeats=3)
    # the group of task t:1 keeps failing: it is left out whole, never returned short
    assert len(episodes) == 15
    assert [ep.id for ep in episodes] == [f"t:{i}:{k}" for i in (0, 2, 3, 4, 5) for k in range(3)]
    reasons = [ep.termination_reason for ep in episodes]
    expected = {
        "ok": TerminationReason.ENV_DONE,
        "raise_once": TerminationReason.ENV_DONE,
        "hang": TerminationReason.TIMEOUT,
        "none": TerminationReason.UNKNOWN,
    }
    assert reasons == [expected[kind] for kind in kinds if kind != "raise" for _ in range(3)]
    assert engine.stats.dropped_groups == 1 and engine.stats.dropped_rollouts == 3
    # task ids with ':' survive: "t:2" is the task of "t:2:2"
    assert episodes[5].task_id == "t:2" and episodes[5].rollout_idx == 2


def test_error_is_retried_then_its_group_dropped() -> None:
    engine = _engine(retry_limit=2)
    [recovered] = _run(engine, ["raise", "raise_once"])
    assert ATTEMPTS["t:0:0"] == 3  # one run and two retries, each with a fresh workflow
    assert ATTEMPTS[recovered.id] == 2 and recovered.termination_reason is TerminationReason.ENV_DONE
    assert recovered.info["attempts"] == 2
    assert engine.stats.as_metrics() == {
        "workflow/attempts": 5.0,
        "workflow/retries": 3.0,
        "workflow/failed": 1.0,
        "workflow/timeouts": 0.0,
        "workflow/dropped_groups": 1.0,
        "workflow/dropped_rollouts": 1.0,
    }


def test_raise_on_error_names_the_task_the_episode_and_the_fix_in_one_line() -> None:
    expected = r"task 't:1' \(episode 't:1:0'\) after 2 attempt\(s\): RuntimeError: boom.*raise_on_error=false"
    with pytest.raises(WorkflowError, match=expected) as caught:
        _run(_engine(raise_on_error=True, retry_limit=1), ["ok", "raise", "hang"])
    assert "\n" not in str(caught.value)
    assert "raise RuntimeError" in caught.value.details  # the traceback travels beside the message


def test_hanging_workflow_times_out_without_blocking_the_others() -> None:
    engine = _engine(timeout=0.3, n_parallel_tasks=8)
    episodes = _run(engine, ["hang"] * 4 + ["ok"] * 4)
    assert [ep.termination_reason for ep in episodes[:4]] == [TerminationReason.TIMEOUT] * 4
    assert all(ep.termination_reason is TerminationReason.ENV_DONE for ep in episodes[4:])
    assert engine.stats.timeouts == 4
    assert all(ATTEMPTS[ep.id] == 1 for ep in episodes[:4])  # a timeout is not retried


def test_parallelism_is_bounded() -> None:
    running = peak = 0

    class Counting(Workflow):
        async def run(self, task: dict[str, Any], uid: str, **kwargs: Any) -> Episode:
            nonlocal running, peak
            running += 1
            peak = max(peak, running)
            await asyncio.sleep(0.01)
            running -= 1
            return Episode(termination_reason=TerminationReason.ENV_DONE)

    engine = WorkflowEngine(Counting, n_parallel_tasks=3)
    asyncio.run(engine.execute_tasks([{}] * 12, ["x"] * 12))
    assert peak == 3


def test_trainer_goes_on_and_counts_failures_when_raise_on_error_is_false(make_config, train) -> None:
    dataset = [{"uid": f"task:{i}", "kind": "raise" if i == 0 else "ok", "reward": i % 2} for i in range(4)]
    config = make_config(
        "rllm.workflow.raise_on_error=false",
        "rllm.workflow.retry_limit=1",
        "rllm.rollout.n=3",
        "rllm.trainer.total_batches=2",
        "rllm.trainer.val_before_train=false",
        "rllm.trainer.test_freq=0",
    )
    ATTEMPTS.clear()
    _, metrics = train(config, FlakyWorkflow, train_dataset=dataset, val_dataset=dataset)
    records = [r for r in metrics if r["kind"] == "train"]
    assert [r["step"] for r in records] == [1, 2]
    for record in records:  # one batch of all four tasks per epoch: 12 rollouts, task:0's 3 failing twice each
        assert record["workflow/failed"] == 3
        assert record["workflow/attempts"] == 15
        assert record["workflow/dropped_groups"] == 1 and record["workflow/dropped_rollouts"] == 3
        assert record["batch/num_episodes"] == 9  # task:0's group is left out, not trained on short
        assert record["batch/termination_reason/error"] == 0
        assert record["grouping/num_groups"] == 3
        assert record["batch/updated"] == 1.0
