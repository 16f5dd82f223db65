"""The workflow engine: many rollouts at once, each retried on error and bounded in time.

Where a workflow physically runs is an executor's business (:mod:`rllm.rollouts.executors`).
Concurrency limits, retries, timeouts, episode naming, episode seeds and the failure policy
stay here, identical for every executor.
"""

from __future__ import annotations

import asyncio
import sys
import time
import traceback
from collections import Counter
from collections.abc import Awaitable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from rllm.contract.names import EXECUTOR_METHODS, FAILURE_POLICIES
from rllm.engine import RolloutEngine, engine_problem
from rllm.errors import ConfigError, DataError, PluginContractError, WorkflowError
from rllm.rollouts.deadlines import Deadlines
from rllm.rollouts.episode_log import EpisodeLogger
from rllm.rollouts.executors import EpisodeSeeds, Executor, LocalExecutor, WorkflowCall
from rllm.rollouts.parallel import merge_counts, share_of
from rllm.rollouts.policy import stamp_weight_version
from rllm.types import Episode, TerminationReason
from rllm.workflows.workflow import Workflow

if TYPE_CHECKING:
    from rllm.rollouts.parallel import ProcessGroup


@dataclass
class EngineStats:
    """Counts since the last ``set_training_step`` (one training step), reported as ``workflow/*`` metrics."""

    attempts: int = 0
    retries: int = 0
    errors: int = 0
    timeouts: int = 0
    dropped_groups: int = 0
    dropped_rollouts: int = 0

    def as_metrics(self) -> dict[str, float]:
        return {
            "workflow/attempts": float(self.attempts),
            "workflow/retries": float(self.retries),
            "workflow/failed": float(self.errors),
            "workflow/timeouts": float(self.timeouts),
            "workflow/dropped_groups": float(self.dropped_groups),
            "workflow/dropped_rollouts": float(self.dropped_rollouts),
        }


async def _within(awaitable: Awaitable[Any], seconds: float | None, deadlines: Deadlines | None) -> Any:
    """``await awaitable``, cancelled with :class:`TimeoutError` after ``seconds`` (None: unbounded).

    On Python 3.11+ the deadline is one of the batch's ``deadlines`` (:mod:`rllm.rollouts.deadlines`:
    ``asyncio.timeout``'s behaviour on the caller's task, one timer for the batch); before 3.11,
    ``wait_for``, which wraps the awaitable in a task of its own.
    """
    if seconds is None or deadlines is None:
        return await asyncio.wait_for(awaitable, seconds)
    deadline = deadlines.enter()
    try:
        result = await awaitable
    except BaseException as error:
        deadlines.leave(deadline, error)
        raise
    deadlines.leave(deadline, None)
    return result


def _step_without_ids(episode: Episode) -> str | None:
    """Why a step of ``episode`` cannot be trained on: a model output that carries no sampled ids."""
    for trajectory in episode.trajectories:
        for index, step in enumerate(trajectory.steps):
            output = step.model_output
            if output is None or step.response_ids:
                continue
            if not getattr(output, "completion_ids", None):
                return (
                    f"step {index} of trajectory {trajectory.name!r} has a ModelOutput without completion_ids; "
                    "the engine must return the sampled token ids (and prompt_ids, logprobs) with every answer"
                )
    return None


def _error_info(exc: BaseException) -> dict[str, str]:
    """What ``episode.info["error"]`` records; an executor's exception may carry it (a worker's error)."""
    carried = getattr(exc, "error_info", None)
    if isinstance(carried, dict):
        return dict(carried)
    return {
        "message": str(exc),
        "type": type(exc).__name__,
        "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
    }


class WorkflowEngine:
    """Runs tasks through a workflow class and returns their episodes, in input order.

    Episode ids are ``"{task_id}:{k}"`` where ``k`` counts the earlier occurrences of the same
    task id in the call; the rollouts of one task id are its *group*. A workflow that raises
    ends ``ERROR`` (details in ``episode.info["error"]``); one that exceeds ``timeout`` seconds
    ends ``TIMEOUT``; one that returns None ends ``UNKNOWN``. What an error does is the
    ``failure_policy``:

    - ``retry``: the rollout is run again with a fresh workflow instance (and the same seed) up
      to ``retry_limit`` more times; still failing, it stops the run if ``raise_on_error``, else
      it is handled as under ``drop_group``;
    - ``drop_group``: the first error leaves the whole group out of the result (counted in
      ``workflow/dropped_groups`` and ``workflow/dropped_rollouts``), so no group is ever
      returned with a rollout missing;
    - ``fail``: the first error raises :class:`WorkflowError` naming the task and the error.

    Every episode, dropped or not, goes to the episode logger.
    """

    def __init__(
        self,
        workflow_cls: type[Workflow],
        workflow_args: dict[str, Any] | None = None,
        rollout_engine: RolloutEngine | None = None,
        *,
        n_parallel_tasks: int = 256,
        retry_limit: int = 3,
        raise_on_error: bool = True,
        timeout: float | None = None,
        executor: Executor | None = None,
        episode_logger: EpisodeLogger | None = None,
        failure_policy: str = "retry",
        seed: int = 0,
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
        if failure_policy not in FAILURE_POLICIES:
            raise ConfigError(
                f"rllm.workflow.failure_policy must be one of {', '.join(FAILURE_POLICIES)}, got {failure_policy!r}."
            )
        if failure_policy == "fail" and not raise_on_error:
            raise ConfigError(
                "rllm.workflow.failure_policy=fail stops the run at the first workflow error, but "
                "rllm.workflow.raise_on_error=false asks to go on; use failure_policy=drop_group to go on."
            )
        problem = None if rollout_engine is None else engine_problem(rollout_engine)
        if problem:
            raise PluginContractError(f"{problem}.")
        missing = [
            name for name in EXECUTOR_METHODS if executor is not None and not callable(getattr(executor, name, None))
        ]
        if missing:
            raise ConfigError(
                f"executor {type(executor).__qualname__} has no {', '.join(f'{name}()' for name in missing)}; an "
                "executor implements rllm.rollouts.Executor (subclass LocalExecutor for its no-op defaults)."
            )
        self.workflow_cls = workflow_cls
        self.workflow_args = dict(workflow_args or {})
        self.rollout_engine = rollout_engine
        self.n_parallel_tasks = int(n_parallel_tasks)
        self.retry_limit = int(retry_limit)
        self.raise_on_error = bool(raise_on_error)
        self.timeout = timeout
        self.executor: Executor = executor or LocalExecutor()
        self.episode_logger = episode_logger
        self.failure_policy = failure_policy
        self.seed = int(seed)
        self.step = 0
        self.version: int | None = None
        self.mode = "train"
        self.epoch = 0
        self.stats = EngineStats()
        self._calls_this_step = 0
        self._started = False

    async def initialize_pool(self) -> None:
        """Start the executor (idempotent)."""
        if not self._started:
            await self.executor.start()
            self._started = True

    def set_training_step(self, step: int, mode: str = "train", epoch: int = 0, version: int | None = None) -> None:
        """Where the next episodes belong (episode seeds and log files) and the policy version they sample (stamped
        on the steps no model call labelled, before the episode log sees them); starts a new count in ``stats``."""
        self.step, self.mode, self.epoch, self.version = step, mode, epoch, version
        self.stats = EngineStats()
        self._calls_this_step = 0

    async def execute_tasks(
        self,
        tasks: Sequence[dict[str, Any]],
        task_ids: Sequence[str],
        is_validation: bool = False,
        share: ProcessGroup | None = None,
    ) -> list[Episode]:
        """Run every task once; ``tasks`` repeats a task to roll it out several times.

        Returns the episodes in input order, without the groups the failure policy dropped.
        With ``share`` (data-parallel training), this process runs only its share of the task
        ids (whole groups, :func:`rllm.rollouts.parallel.share_of`), each episode seeded as in
        one process, and every process gets back all processes' episodes and counts.
        """
        if len(tasks) != len(task_ids):
            raise DataError(f"execute_tasks got {len(tasks)} tasks but {len(task_ids)} task ids.")
        await self.initialize_pool()
        mode = "val" if is_validation else self.mode
        call_index, self._calls_this_step = self._calls_this_step, self._calls_this_step + 1
        seen: Counter[str] = Counter()
        ordinal: dict[str, int] = {}
        calls = []
        seed_of = EpisodeSeeds(self.seed, mode, self.step, call_index)
        for task, task_id in zip(tasks, task_ids, strict=True):
            k = seen[task_id]
            seen[task_id] += 1
            index = ordinal.setdefault(task_id, len(ordinal))
            seed = seed_of(index, k)
            calls.append(
                WorkflowCall(self.workflow_cls, self.workflow_args, self.rollout_engine, task, f"{task_id}:{k}", seed)
            )
        if share is not None:  # this process's task ids only: whole groups, seeded as above
            mine = share_of(len(ordinal), share.rank, share.world_size)
            chosen = [i for i, task_id in enumerate(task_ids) if ordinal[task_id] in mine]
            calls, task_ids = [calls[i] for i in chosen], [task_ids[i] for i in chosen]
        engine = self.rollout_engine
        if engine is not None:  # before the executor snapshots it for workers: rLLM's workflows read the flag
            engine.is_validation = is_validation
        try:
            return await self._execute(calls, task_ids, share, mode)
        finally:
            if engine is not None:
                engine.is_validation = False

    async def _execute(
        self, calls: list[WorkflowCall], task_ids: Sequence[str], share: ProcessGroup | None, mode: str
    ) -> list[Episode]:
        if calls:
            await self.executor.prepare(calls[0])
        stats = EngineStats() if share is not None else self.stats
        failed_groups: set[str] = set()
        limit = asyncio.Semaphore(self.n_parallel_tasks)
        deadlines = Deadlines(self.timeout) if self.timeout is not None and sys.version_info >= (3, 11) else None
        loop = asyncio.get_running_loop()  # its create_task: ensure_future's type checks were a cost per rollout
        jobs = [
            loop.create_task(self._run_with_policy(call, task_id, limit, stats, failed_groups, deadlines))
            for call, task_id in zip(calls, task_ids, strict=True)
        ]
        try:
            episodes = list(await asyncio.gather(*jobs))
        except BaseException:
            for job in jobs:
                job.cancel()
            await asyncio.gather(*jobs, return_exceptions=True)
            raise
        finally:
            if deadlines is not None:
                deadlines.close()
        if share is not None:
            episodes, task_ids, failed_groups = self._gathered(share, episodes, task_ids, failed_groups, stats)
            stats = self.stats
        stamp_weight_version(episodes, self.version)
        if self.episode_logger is not None:
            self.episode_logger.log(episodes, step=self.step, mode=mode)
        if not failed_groups:
            return episodes
        kept = [ep for ep, task_id in zip(episodes, task_ids, strict=True) if task_id not in failed_groups]
        stats.dropped_groups += len(failed_groups)
        stats.dropped_rollouts += len(episodes) - len(kept)
        return kept

    def _gathered(
        self,
        share: ProcessGroup,
        episodes: list[Episode],
        task_ids: Sequence[str],
        failed: set[str],
        stats: EngineStats,
    ) -> tuple[list[Episode], list[str], set[str]]:
        """Every process's episodes (in rank order, which is input order), task ids and failed groups; the counts
        are added to this step's ``stats``. Each process decodes the same JSON, so all hold equal episodes."""
        mine = {
            "episodes": [episode.to_dict() for episode in episodes],
            "task_ids": list(task_ids),
            "failed": sorted(failed),
            "stats": asdict(stats),
        }
        parts = share.gather(mine)
        for key, value in merge_counts([part["stats"] for part in parts]).items():
            setattr(self.stats, key, getattr(self.stats, key) + value)
        everyone = [Episode.from_dict(data) for part in parts for data in part["episodes"]]
        ids = [task_id for part in parts for task_id in part["task_ids"]]
        return everyone, ids, {task_id for part in parts for task_id in part["failed"]}

    async def _run_with_policy(
        self,
        call: WorkflowCall,
        task_id: str,
        limit: asyncio.Semaphore,
        stats: EngineStats,
        failed_groups: set[str],
        deadlines: Deadlines | None = None,
    ) -> Episode:
        """One rollout, with the retries its policy allows; a rollout still failing marks its group.

        The retry loop is rllm's own (no retry library): each attempt is a fresh workflow instance with the same
        seed, counted in the step's stats, which is the failure policy's meaning rather than a generic back-off.
        """
        attempts = self.retry_limit + 1 if self.failure_policy == "retry" else 1
        async with limit:
            for attempt in range(attempts):
                stats.attempts += 1
                stats.retries += attempt > 0
                episode = await self._attempt(call, deadlines)
                episode.info["attempts"] = attempt + 1
                if episode.termination_reason is not TerminationReason.ERROR:
                    if episode.termination_reason is TerminationReason.TIMEOUT:
                        stats.timeouts += 1
                    return episode
        stats.errors += 1
        if self.failure_policy == "fail" or (self.failure_policy == "retry" and self.raise_on_error):
            raise self._failure(call, task_id, episode, attempts)
        failed_groups.add(task_id)
        return episode

    def _failure(self, call: WorkflowCall, task_id: str, episode: Episode, attempts: int) -> WorkflowError:
        """One line naming the task, the episode and the error; the traceback travels on ``details``."""
        error = episode.info["error"]
        if self.failure_policy == "fail":
            fix = "or set rllm.workflow.failure_policy=retry or drop_group to go on without it"
        else:
            fix = "or set rllm.workflow.raise_on_error=false to drop the group and go on"
        message = (
            f"Workflow {self.workflow_cls.__name__} failed on task {task_id!r} (episode {call.uid!r}) after "
            f"{attempts} attempt(s): {error['type']}: {' '.join(str(error['message']).split()).rstrip('.')}. "
            f"Fix the workflow, {fix}."
        )
        failure = WorkflowError(message)
        failure.details = error.get("traceback", "")
        return failure

    async def _attempt(self, call: WorkflowCall, deadlines: Deadlines | None = None) -> Episode:
        started = time.perf_counter()
        try:
            result = await _within(self.executor.run(call), self.timeout, deadlines)
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
        problem = _step_without_ids(episode)
        if problem is not None and episode.termination_reason is not TerminationReason.ERROR:
            episode.termination_reason = TerminationReason.ERROR
            episode.info["error"] = {"message": problem, "type": "DataError", "traceback": ""}
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
