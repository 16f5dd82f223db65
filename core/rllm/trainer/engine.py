"""The workflow engine: many rollouts at once, each retried on error and bounded in time.

Where a workflow physically runs is an :class:`Executor`'s business. The engine only needs
``await executor.run(call)`` to return the workflow's result (or raise), so a distributed
executor (Ray actors, a process pool) can replace :class:`LocalExecutor` without touching
the engine or the trainer. Concurrency limits, retries, timeouts and episode naming stay
here, identical for every executor.
"""

from __future__ import annotations

import asyncio
import time
import traceback
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from rllm.errors import ConfigError, DataError, WorkflowError
from rllm.trainer.logging import EpisodeLogger
from rllm.types import Episode, TerminationReason
from rllm.workflows.workflow import Workflow


@dataclass(frozen=True)
class WorkflowCall:
    """Everything an executor needs to run one rollout, wherever it runs it."""

    workflow_class: type[Workflow]
    workflow_args: dict[str, Any]
    rollout_engine: Any
    task: dict[str, Any]
    uid: str


class Executor(Protocol):
    """Runs workflow calls. ``run`` may be cancelled (on timeout) and must then stop the rollout."""

    async def start(self) -> None: ...

    async def run(self, call: WorkflowCall) -> Episode | None: ...

    def shutdown(self) -> None: ...


class LocalExecutor:
    """Runs workflows as coroutines on the trainer's event loop."""

    async def start(self) -> None:
        """Nothing to start: the event loop is the worker pool."""

    async def run(self, call: WorkflowCall) -> Episode | None:
        workflow = call.workflow_class(rollout_engine=call.rollout_engine, **call.workflow_args)
        return await workflow.run(call.task, call.uid)

    def shutdown(self) -> None:
        """Nothing to release."""


@dataclass
class EngineStats:
    """Counts of one ``execute_tasks`` call, reported as ``workflow/*`` metrics."""

    attempts: int = 0
    retries: int = 0
    errors: int = 0
    timeouts: int = 0

    def as_metrics(self) -> dict[str, float]:
        return {
            "workflow/attempts": float(self.attempts),
            "workflow/retries": float(self.retries),
            "workflow/failed": float(self.errors),
            "workflow/timeouts": float(self.timeouts),
        }


def _error_info(exc: BaseException) -> dict[str, str]:
    return {
        "message": str(exc),
        "type": type(exc).__name__,
        "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
    }


class WorkflowEngine:
    """Runs tasks through a workflow class and returns one episode per task, in input order.

    Episode ids are ``"{task_id}:{k}"`` where ``k`` counts the earlier occurrences of the same
    task id in the call. A workflow that raises ends ``ERROR`` (details in
    ``episode.info["error"]``) and is run again up to ``retry_limit`` more times; one that
    exceeds ``timeout`` seconds ends ``TIMEOUT``; one that returns None ends ``UNKNOWN``. After
    the retries an error raises :class:`WorkflowError` if ``raise_on_error``, else the
    ``ERROR`` episode is returned and counted in the metrics.
    """

    def __init__(
        self,
        workflow_cls: type[Workflow],
        workflow_args: dict[str, Any] | None = None,
        rollout_engine: Any = None,
        *,
        n_parallel_tasks: int = 256,
        retry_limit: int = 3,
        raise_on_error: bool = True,
        timeout: float | None = None,
        executor: Executor | None = None,
        episode_logger: EpisodeLogger | None = None,
    ) -> None:
        if not isinstance(workflow_cls, type) or not issubclass(workflow_cls, Workflow):
            raise ConfigError(
                f"workflow_class must be a subclass of rllm.workflows.workflow.Workflow, got {workflow_cls!r}."
            )
        if int(n_parallel_tasks) < 1:
            raise ConfigError(f"rllm.workflow.n_parallel_tasks must be at least 1, got {n_parallel_tasks}.")
        if int(retry_limit) < 0:
            raise ConfigError(f"rllm.workflow.retry_limit must be 0 or more, got {retry_limit}.")
        if timeout is not None and not timeout > 0:
            raise ConfigError(f"rllm.workflow.timeout must be a positive number of seconds or null, got {timeout}.")
        self.workflow_cls = workflow_cls
        self.workflow_args = dict(workflow_args or {})
        self.rollout_engine = rollout_engine
        self.n_parallel_tasks = int(n_parallel_tasks)
        self.retry_limit = int(retry_limit)
        self.raise_on_error = bool(raise_on_error)
        self.timeout = timeout
        self.executor: Executor = executor or LocalExecutor()
        self.episode_logger = episode_logger
        self.step = 0
        self.mode = "train"
        self.epoch = 0
        self.last_stats = EngineStats()
        self._started = False

    async def initialize_pool(self) -> None:
        """Start the executor (idempotent)."""
        if not self._started:
            await self.executor.start()
            self._started = True

    def set_training_step(self, step: int, mode: str = "train", epoch: int = 0) -> None:
        """Where the next episodes belong; used to name episode log files."""
        self.step, self.mode, self.epoch = step, mode, epoch

    async def execute_tasks(
        self, tasks: Sequence[dict[str, Any]], task_ids: Sequence[str], is_validation: bool = False
    ) -> list[Episode]:
        """Run every task once; ``tasks`` repeats a task to roll it out several times."""
        if len(tasks) != len(task_ids):
            raise DataError(f"execute_tasks got {len(tasks)} tasks but {len(task_ids)} task ids.")
        await self.initialize_pool()
        seen: Counter[str] = Counter()
        uids = []
        for task_id in task_ids:
            uids.append(f"{task_id}:{seen[task_id]}")
            seen[task_id] += 1
        stats = EngineStats()
        limit = asyncio.Semaphore(self.n_parallel_tasks)
        jobs = [
            asyncio.ensure_future(self._run_with_retries(task, uid, limit, stats))
            for task, uid in zip(tasks, uids, strict=True)
        ]
        try:
            episodes = list(await asyncio.gather(*jobs))
        except BaseException:
            for job in jobs:
                job.cancel()
            await asyncio.gather(*jobs, return_exceptions=True)
            raise
        self.last_stats = stats
        if self.episode_logger is not None:
            self.episode_logger.log(episodes, step=self.step, mode="val" if is_validation else self.mode)
        return episodes

    async def _run_with_retries(
        self, task: dict[str, Any], uid: str, limit: asyncio.Semaphore, stats: EngineStats
    ) -> Episode:
        call = WorkflowCall(self.workflow_cls, self.workflow_args, self.rollout_engine, task, uid)
        async with limit:
            for attempt in range(self.retry_limit + 1):
                stats.attempts += 1
                stats.retries += attempt > 0
                episode = await self._attempt(call)
                episode.info["attempts"] = attempt + 1
                if episode.termination_reason is not TerminationReason.ERROR:
                    if episode.termination_reason is TerminationReason.TIMEOUT:
                        stats.timeouts += 1
                    return episode
        stats.errors += 1
        if self.raise_on_error:
            error = episode.info["error"]
            raise WorkflowError(
                f"Workflow {self.workflow_cls.__name__} failed on episode {uid!r} after "
                f"{self.retry_limit + 1} attempt(s): {error['type']}: {error['message']}. Fix the workflow, "
                "or set rllm.workflow.raise_on_error=false to train on without failed episodes.\n"
                f"Last traceback:\n{error['traceback']}"
            )
        return episode

    async def _attempt(self, call: WorkflowCall) -> Episode:
        started = time.perf_counter()
        try:
            result = await asyncio.wait_for(self.executor.run(call), self.timeout)
        except asyncio.TimeoutError:
            episode = Episode(termination_reason=TerminationReason.TIMEOUT)
            episode.info["error"] = {"message": f"no result within {self.timeout} s", "type": "TimeoutError"}
        except Exception as exc:
            episode = Episode(termination_reason=TerminationReason.ERROR)
            episode.info["error"] = _error_info(exc)
        else:
            if result is None:
                episode = Episode(termination_reason=TerminationReason.UNKNOWN)
            elif isinstance(result, Episode):
                episode = result
                if episode.termination_reason is None:
                    episode.termination_reason = TerminationReason.UNKNOWN
            else:
                episode = Episode(termination_reason=TerminationReason.ERROR)
                episode.info["error"] = {
                    "message": f"run() returned {type(result).__name__}, not an Episode",
                    "type": "TypeError",
                    "traceback": "",
                }
        episode.id = call.uid
        if episode.task is None:
            episode.task = call.task
        if isinstance(call.task, dict) and "data_source" in call.task:
            episode.info.setdefault("data_source", call.task["data_source"])
        episode.info["workflow_seconds"] = time.perf_counter() - started
        return episode

    def shutdown(self) -> None:
        self.executor.shutdown()
        self._started = False
