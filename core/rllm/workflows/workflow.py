"""Workflows: the code that turns one task into one :class:`~rllm.types.Episode`.

A workflow talks to the rollout engine the backend provides (the model) and to whatever
environment the task needs, and returns the episode with its trajectories, rewards and
``is_correct``. The workflow engine runs many of them concurrently, names their episodes,
retries failures and enforces timeouts, so a workflow only describes one rollout.
"""

from __future__ import annotations

from typing import Any

from rllm.engine import RolloutEngine
from rllm.types import Episode, TerminationEvent, TerminationReason

__all__ = ["TerminationEvent", "TerminationReason", "Workflow"]


class Workflow:
    """Base class of workflows. Subclasses implement :meth:`run`.

    A new instance is made for every rollout as
    ``workflow_class(rollout_engine=engine, **workflow_args)``, so instance attributes never
    leak between rollouts. ``run`` must be cooperative (``await`` the engine, use
    ``asyncio.to_thread`` for blocking calls), otherwise the per-workflow timeout cannot
    interrupt it.
    """

    seed: int | None = None
    """This episode's seed, set by the engine before ``run``: seed the environment's randomness
    from it (``numpy.random.default_rng(self.seed)``) so every executor gives the same episode."""

    def __init__(self, rollout_engine: RolloutEngine, **kwargs: Any) -> None:
        self.rollout_engine = rollout_engine
        self.options = kwargs

    async def run(self, task: dict[str, Any], uid: str, **kwargs: Any) -> Episode | None:
        """Roll out ``task`` once and return the episode (its id is set to ``uid`` afterwards).

        Set ``episode.termination_reason`` (``ENV_DONE`` when the task finished normally) and
        ``episode.is_correct``; raise to report an error (the engine retries it), return None
        if there is nothing to report (the episode ends ``UNKNOWN``).
        """
        raise NotImplementedError(f"{type(self).__name__} must implement async run(task, uid)")
