"""Workflows: the code that turns one task into one :class:`~rllm.types.Episode`.

A workflow talks to the rollout engine the backend provides (the model) and to whatever
environment the task needs, and returns the episode with its trajectories, rewards and
``is_correct``. The workflow engine runs many of them concurrently, names their episodes,
retries failures and enforces timeouts, so a workflow only describes one rollout.

Two styles end an episode. This project's workflows build the :class:`Episode` and return
it. rLLM's workflows :meth:`~Workflow.commit` trajectories (or keep them on their agents) and
raise :class:`TerminationEvent`: the engine then builds the episode from what was collected,
through :meth:`~Workflow.postprocess_episode`, with the event's reason, as rLLM does.
"""

from __future__ import annotations

import asyncio
import traceback
from collections import defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import Executor
from functools import partial
from typing import Any, cast

from rllm.agents.agent import BaseAgent
from rllm.engine import RolloutEngine
from rllm.environments.base.base_env import BaseEnv
from rllm.errors import DataError
from rllm.types import Episode, TerminationEvent, TerminationReason, Trajectory
from rllm.usercode import call_user

__all__ = ["TerminationEvent", "TerminationReason", "Workflow"]


class Workflow:
    """Base class of workflows (rLLM's ``Workflow``). Subclasses implement :meth:`run`.

    A new instance is made for every rollout as
    ``workflow_class(rollout_engine=engine, **workflow_args)``, so instance attributes never
    leak between rollouts. ``run`` must be cooperative (``await`` the engine, use
    :meth:`run_in_executor` or ``asyncio.to_thread`` for blocking calls), otherwise the
    per-workflow timeout cannot interrupt it.

    rLLM's constructor arguments: ``executor`` runs :meth:`run_in_executor`'s blocking calls
    (None: the event loop's default thread pool); ``timeout`` bounds
    :meth:`run_with_termination_handling` only (the trainer's bound is ``rllm.workflow.timeout``);
    ``gamma`` and ``reward_bonus_coeff`` shape multi-step rewards in :meth:`adjust_step_rewards`;
    ``store`` is an object shared by every instance. Other keyword arguments are kept in
    ``options``.
    """

    seed: int | None = None
    """This episode's seed, set by the engine before ``run``: seed the environment's randomness
    from it (``numpy.random.default_rng(self.seed)``) so every executor gives the same episode."""

    def __init__(
        self,
        rollout_engine: RolloutEngine,
        executor: Executor | None = None,
        timeout: float = 1e6,
        gamma: float = 0.0,
        reward_bonus_coeff: float = 0.0,
        store: Any = None,
        **kwargs: Any,
    ) -> None:
        self.rollout_engine = rollout_engine
        self.executor = executor
        self.timeout = timeout
        self.gamma = float(gamma)
        self.reward_bonus_coeff = float(reward_bonus_coeff)
        self.store = store
        self.options = kwargs
        self.uid: str | None = None
        self.task: Any = None
        self._completed_trajectories: list[Trajectory] = []

    async def run(self, task: dict[str, Any], uid: str, **kwargs: Any) -> Episode | None:
        """Roll out ``task`` once and return the episode (its id is set to ``uid`` afterwards).

        Set ``episode.termination_reason`` (``ENV_DONE`` when the task finished normally) and
        ``episode.is_correct``; raise to report an error (the engine retries it), return None
        if there is nothing to report (the episode ends ``UNKNOWN``). Or, as rLLM's workflows
        do, commit trajectories and raise :class:`TerminationEvent` with the reason.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement async run(task, uid)")

    def _members(self, kind: type) -> Iterator[Any]:
        """The instance attributes that are ``kind`` (the workflow's agents, or its environments)."""
        return (value for value in list(vars(self).values()) if isinstance(value, kind))

    def reset(self, task: dict[str, Any] | None = None, uid: str | None = None) -> None:
        """Start an episode of ``task``: forget committed trajectories, reset every agent and environment."""
        self.uid, self.task = uid, task
        self._completed_trajectories = []
        for agent in self._members(BaseAgent):
            agent.reset()
            agent.trajectory.task = task
        for env in self._members(BaseEnv):
            env.reset(task=task)

    def commit(
        self,
        name: str | None = None,
        agent: BaseAgent | None = None,
        trajectory: Trajectory | None = None,
        reset: bool = False,
    ) -> None:
        """Keep a copy of ``agent``'s trajectory (or of ``trajectory``) for the episode, named ``name`` if given.

        A trajectory without steps is not kept. ``reset`` resets the agent afterwards, so it
        can start the next trajectory of the same episode.
        """
        if (agent is None) == (trajectory is None):
            raise DataError(
                f"{type(self).__name__}.commit() takes one of agent= or trajectory=, got "
                f"{'both' if agent is not None else 'neither'}."
            )
        kept = agent.trajectory if agent is not None else cast(Trajectory, trajectory)
        if name:
            kept.name = name
        if kept.steps:
            self._completed_trajectories.append(kept.snapshot())
        if agent is not None and reset:
            agent.reset()

    def collect_trajectories(self) -> Episode:
        """An episode of the committed trajectories, then those still on agents (not committed, with steps)."""
        trajectories = list(self._completed_trajectories)
        committed = {trajectory.uid for trajectory in trajectories}
        for agent in self._members(BaseAgent):
            current = agent.trajectory
            if current.steps and current.uid not in committed:
                trajectories.append(current.snapshot())
        return Episode(trajectories=trajectories)

    def compute_trajectory_reward(self, trajectory: Trajectory) -> None:
        """The trajectory's reward: by default the sum of its steps' rewards."""
        trajectory.reward = float(sum(step.reward for step in trajectory.steps))

    def adjust_step_rewards(self, trajectory: Trajectory) -> None:
        """Shape and discount the step rewards of a multi-step trajectory (nothing with the default 0 and 0).

        ``reward_bonus_coeff`` adds ``coeff * (r[i] - r[i-1])`` to step ``i``'s reward (progress
        bonus, from the raw rewards); then ``gamma > 0`` replaces each reward by its discounted
        return ``r[i] + gamma * G[i+1]``.
        """
        steps = trajectory.steps
        if self.reward_bonus_coeff > 0.0:
            raw = [step.reward for step in steps]
            for i in range(1, len(steps)):
                steps[i].reward += self.reward_bonus_coeff * (raw[i] - raw[i - 1])
        if self.gamma > 0.0:
            ahead = 0.0
            for step in reversed(steps):
                ahead = step.reward + self.gamma * ahead
                step.reward = ahead

    def assign_episode_correctness(self, episode: Episode) -> None:
        """``episode.is_correct``: by default, whether the trajectories' rewards add up to more than 0."""
        episode.is_correct = sum(trajectory.reward or 0.0 for trajectory in episode.trajectories) > 0

    def collect_metrics(self, episode: Episode) -> None:
        """``episode.metrics``: by default ``{name}_acc``, the mean reward of the trajectories of each name."""
        rewards: defaultdict[str, list[float]] = defaultdict(list)
        for trajectory in episode.trajectories:
            rewards[trajectory.name].append(trajectory.reward or 0.0)
        episode.metrics = {f"{name}_acc": sum(values) / len(values) for name, values in rewards.items()}

    def postprocess_episode(
        self,
        episode: Episode,
        termination_reason: TerminationReason | None = None,
        error: dict[str, Any] | None = None,
    ) -> Episode:
        """Finish a collected episode: task and id, rewards, correctness, metrics, error and reason.

        A trajectory's last step without messages (the agent saw an observation, the model
        never answered it) is dropped first.
        """
        if self.uid is not None:
            episode.id = self.uid
        episode.task = self.task
        for trajectory in episode.trajectories:
            if trajectory.steps and not trajectory.steps[-1].chat_completions:
                trajectory.steps.pop()
            self.compute_trajectory_reward(trajectory)
            if len(trajectory.steps) > 1:
                self.adjust_step_rewards(trajectory)
        self.assign_episode_correctness(episode)
        self.collect_metrics(episode)
        if error is not None:
            episode.info["error"] = error
        episode.termination_reason = termination_reason or TerminationReason.UNKNOWN
        return episode

    def terminated(self, event: TerminationEvent) -> Episode:
        """The episode of a run that raised ``event``: what was collected, post-processed with its reason."""
        return self.postprocess_episode(self.collect_trajectories(), event.reason)

    async def run_with_termination_handling(self, task: dict[str, Any], uid: str, **kwargs: Any) -> Episode:
        """``run`` that always gives an episode (rLLM's wrapper), for callers outside the trainer.

        A returned episode is kept as it is; otherwise the collected trajectories are
        post-processed with the reason: ``UNKNOWN`` (returned None), ``TIMEOUT`` (beyond
        ``kwargs['timeout']``, default ``timeout``), the :class:`TerminationEvent`'s, or
        ``ERROR`` with ``info["error"]`` (message, type, traceback). The trainer does the same
        through its workflow engine, with retries.
        """
        timeout = kwargs.pop("timeout", self.timeout)
        try:
            output = await asyncio.wait_for(self.run(task, uid, **kwargs), timeout=timeout)
        except asyncio.TimeoutError:
            return self.postprocess_episode(self.collect_trajectories(), TerminationReason.TIMEOUT)
        except TerminationEvent as event:
            return self.terminated(event)
        except Exception as exc:
            error = {"message": str(exc), "type": type(exc).__name__, "traceback": traceback.format_exc()}
            return self.postprocess_episode(self.collect_trajectories(), TerminationReason.ERROR, error)
        if isinstance(output, Episode):
            return output
        return self.postprocess_episode(self.collect_trajectories(), TerminationReason.UNKNOWN)

    def is_multithread_safe(self) -> bool:
        """Whether every environment of the workflow may be stepped from several threads at once."""
        return all(env.is_multithread_safe() for env in self._members(BaseEnv))

    async def run_in_executor(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` on ``executor`` (a blocking call that must not stall the event loop); its
        ``sys.exit()`` is a :class:`~rllm.errors.UserCodeExit` of the workflow, as one in :meth:`run` is."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, partial(call_user, fn, *args, **kwargs))
