"""The environment of rLLM's agent-and-environment workflows: Gym's ``reset``/``step``, made from a task dict."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

__all__ = ["BaseEnv"]


class BaseEnv(ABC):
    """Base class of environments (rLLM's ``BaseEnv``): implement ``reset``, ``step`` and ``from_dict``."""

    @property
    def idx(self) -> Any:
        """This environment's position in a batch, or None when it was never given one."""
        return getattr(self, "_idx", None)

    @idx.setter
    def idx(self, value: Any) -> None:
        self._idx = value

    @abstractmethod
    def reset(self) -> tuple[Any, dict[str, Any]]:
        """Start an episode: ``(observation, info)``."""

    @abstractmethod
    def step(self, action: Any) -> tuple[Any, float, bool, dict[str, Any]]:
        """Apply ``action``: ``(observation, reward, done, info)``."""

    def close(self) -> None:
        """Release what the environment holds (processes, sandboxes); default nothing."""
        return None

    @staticmethod
    @abstractmethod
    def from_dict(info: dict[str, Any]) -> BaseEnv:
        """The environment of one task (its row of the dataset)."""

    @staticmethod
    def is_multithread_safe() -> bool:
        """Whether episodes may step this environment class from several threads at once (default True)."""
        return True
