"""The reward function's shape (:class:`RewardFunction`): ``(task_info, action) -> RewardOutput``, at rLLM's path.

rLLM's own graders (``math_reward_fn``, ``code_reward_fn``, ``search_reward_fn``,
``f1_reward_fn``) are not part of rllm; importing one says so and what to write instead.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from rllm.errors import NotShippedError
from rllm.rewards.reward_types import RewardOutput
from rllm.types import Action

__all__ = ["RewardFunction", "zero_reward"]

RLLM_GRADERS = ("math_reward_fn", "code_reward_fn", "search_reward_fn", "f1_reward_fn")


@runtime_checkable
class RewardFunction(Protocol):
    """Scores an agent's answer to a task. ``action`` is the answer's text, or an :class:`~rllm.types.Action`."""

    def __call__(self, task_info: dict[str, Any], action: str | Action) -> RewardOutput: ...


def zero_reward(task_info: dict[str, Any], action: str | Action) -> RewardOutput:
    """A reward of 0 for every answer: a placeholder while a task has no grader."""
    return RewardOutput(reward=0.0, metadata={})


def __getattr__(name: str) -> Any:
    if name in RLLM_GRADERS:
        raise NotShippedError(
            f"{name} is one of rLLM's graders (rllm.rewards.reward_fn), which rllm does not ship: pass your own "
            "reward function, a callable (task_info: dict, action) -> rllm.rewards.RewardOutput (see docs/agents.md)."
        )
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
