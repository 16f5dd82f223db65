"""Where a workflow runs: the call an executor receives, the executor interface, and the in-process executor.

The workflow engine only needs ``await executor.run(call)`` to return the workflow's result (or raise),
so a distributed executor (Ray actors, a process pool) can replace :class:`LocalExecutor` without
touching the engine or the trainer. Every executor runs an attempt through :func:`run_call`, on a
fresh workflow seeded by :func:`episode_seed`, so an episode is the same wherever it ran.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Protocol

from rllm.engine import RolloutEngine
from rllm.errors import UserCodeExit
from rllm.types import Episode, TerminationEvent
from rllm.usercode import exit_error, is_real_interrupt
from rllm.workflows.workflow import Workflow

__all__ = ["EpisodeSeeds", "Executor", "LocalExecutor", "WorkflowCall", "episode_seed", "instantiate", "run_call"]


@dataclass(frozen=True)
class WorkflowCall:
    """Everything an executor needs to run one rollout, wherever it runs it."""

    workflow_class: type[Workflow]
    workflow_args: dict[str, Any]
    rollout_engine: RolloutEngine | None
    task: dict[str, Any]
    uid: str
    seed: int | None = None
    """The episode's seed (see :func:`episode_seed`); the same on every attempt and every executor."""


class Executor(Protocol):
    """Runs workflow calls. ``run`` may be cancelled (on timeout) and must then stop the rollout.

    ``prepare(call)`` runs before each batch with the batch's first call (all of a batch's
    calls share the workflow class, its arguments and the rollout engine), since the policy
    may have changed since the last batch. What it raises stops the run, before any rollout.
    """

    async def start(self) -> None: ...

    async def prepare(self, call: WorkflowCall) -> None: ...

    async def run(self, call: WorkflowCall) -> Episode | None: ...

    def shutdown(self) -> None: ...


def episode_seed(run_seed: int, mode: str, step: int, call_index: int, task_index: int, rollout: int) -> int:
    """A 63-bit seed for one episode, from the run seed and where the episode sits.

    ``call_index`` counts the engine's batches within a step (dynamic sampling runs several),
    ``task_index`` the distinct tasks of the batch, ``rollout`` the rollouts of one task. It
    does not depend on scheduling, so every executor gives an episode the same seed.
    """
    return EpisodeSeeds(run_seed, mode, step, call_index)(task_index, rollout)


class EpisodeSeeds:
    """:func:`episode_seed` for the episodes of one batch: the hash of the batch's part is taken once, then copied."""

    def __init__(self, run_seed: int, mode: str, step: int, call_index: int) -> None:
        self.batch = hashlib.blake2b(f"{run_seed},{mode},{step},{call_index},".encode(), digest_size=8)

    def __call__(self, task_index: int, rollout: int) -> int:
        words = self.batch.copy()
        words.update(f"{task_index},{rollout}".encode())
        return int.from_bytes(words.digest(), "little") >> 1


def instantiate(call: WorkflowCall, rollout_engine: RolloutEngine | None) -> Workflow:
    """A fresh workflow for one attempt, sampling with the episode's own random stream.

    The rollout engine's ``for_episode(seed)`` hands each episode a view seeded with its seed,
    so what it samples does not depend on which episodes ran before it, or where.
    """
    if call.seed is not None and rollout_engine is not None:
        rollout_engine = rollout_engine.for_episode(call.seed)
    workflow = call.workflow_class(rollout_engine=rollout_engine, **call.workflow_args)
    workflow.seed = call.seed
    return workflow


async def run_call(call: WorkflowCall, rollout_engine: RolloutEngine | None) -> Episode | None:
    """One attempt of ``call`` on a fresh workflow (what every executor runs).

    A :class:`TerminationEvent` is how rLLM's workflows end an episode, not an error: the
    episode is what the workflow collected, post-processed with the event's reason. A workflow
    that calls ``sys.exit()`` (or raises another ``BaseException`` that is no real interrupt) fails
    with :class:`~rllm.errors.UserCodeExit`, an episode error like any other.
    """
    workflow = instantiate(call, rollout_engine)
    try:
        return await workflow.run(call.task, call.uid)
    except TerminationEvent as event:
        return workflow.terminated(event)
    except Exception:
        raise
    except BaseException as exc:  # sys.exit() in a workflow is its failure: the failure policy decides what follows
        if is_real_interrupt(exc):
            raise
        raise UserCodeExit(f"workflow {type(workflow).__qualname__} {exit_error(exc).how}") from None


class LocalExecutor:
    """Runs workflows as coroutines on the trainer's event loop."""

    async def start(self) -> None:
        """Nothing to start: the event loop is the worker pool."""

    async def prepare(self, call: WorkflowCall) -> None:
        """Nothing to send: the batch's calls run here, with the rollout engine itself."""

    async def run(self, call: WorkflowCall) -> Episode | None:
        return await run_call(call, call.rollout_engine)

    def shutdown(self) -> None:
        """Nothing to release."""
