"""The agent of rLLM's agent-and-environment workflows (:class:`BaseAgent`), and the data model at its old path.

An agent keeps the conversation: the environment's observations go in through
:meth:`~BaseAgent.update_from_env`, the model's answers through
:meth:`~BaseAgent.update_from_model` (which returns the :class:`~rllm.types.Action` the
environment gets), and :attr:`~BaseAgent.chat_completions` is what the model is asked next.
Its :attr:`~BaseAgent.trajectory` is what the workflow commits for training.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from rllm.types import Action, Episode, Step, Trajectory, TrajectoryGroup

__all__ = ["Action", "BaseAgent", "Episode", "Step", "Trajectory", "TrajectoryGroup"]


class BaseAgent(ABC):
    """Base class of agents (rLLM's ``BaseAgent``). Subclasses implement :meth:`reset` and the two updates."""

    @property
    def chat_completions(self) -> list[dict[str, Any]]:
        """The messages the model answers next (default: none)."""
        return []

    @property
    def trajectory(self) -> Trajectory:
        """The steps taken so far in this episode (default: an empty trajectory)."""
        return Trajectory()

    def update_from_env(self, observation: Any, reward: float, done: bool, info: dict[str, Any], **kwargs: Any) -> None:
        """Take in what the environment answered to the last action."""
        raise NotImplementedError(f"{type(self).__qualname__} must implement update_from_env(observation, reward, ...)")

    def update_from_model(self, response: str, **kwargs: Any) -> Action:
        """Take in the model's answer and return the action for the environment."""
        raise NotImplementedError(f"{type(self).__qualname__} must implement update_from_model(response)")

    @abstractmethod
    def reset(self) -> None:
        """Forget the last episode (called before each one)."""

    def get_current_state(self) -> Step | None:
        """The last step of :attr:`trajectory`, or None before the first."""
        steps = self.trajectory.steps
        return steps[-1] if steps else None
