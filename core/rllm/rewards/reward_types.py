"""What a reward function returns (:class:`RewardOutput`) and takes, at rLLM's path."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

__all__ = ["RewardInput", "RewardOutput", "RewardType"]


class RewardType(Enum):
    """The kind of problem a reward judges (rLLM's names)."""

    MATH = "MATH"
    CODE = "CODE"
    WEB = "WEB"
    UNK = "UNK"


@dataclass(slots=True, kw_only=True)
class RewardInput:
    """A task and the agent's answer to it, as one argument."""

    task_info: dict[str, Any]
    action: str


@dataclass(slots=True, kw_only=True)
class RewardOutput:
    """A reward function's verdict: the reward, what it saw, and whether the answer is correct (None: not said)."""

    reward: float
    metadata: dict[str, Any] = field(default_factory=dict)
    is_correct: bool | None = None
