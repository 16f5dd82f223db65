"""What scores an episode, and what it returns, at rLLM's path: :class:`Evaluator` and :class:`EvalOutput`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from rllm.types import Episode

__all__ = ["EvalOutput", "Evaluator", "Signal"]


@dataclass
class Signal:
    """One named score of an episode (accuracy, format, ...), reported as a metric beside the reward."""

    name: str
    value: float
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class EvalOutput:
    """An episode's score: ``reward`` is what the policy is trained on, ``is_correct`` what pass@k counts."""

    reward: float
    is_correct: bool
    signals: list[Signal] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Evaluator(Protocol):
    """Scores an :class:`~rllm.types.AgentFlow`'s episode (rLLM's ``Evaluator``); the reward is written onto
    its steps. ``rllm.types`` exports it too, as rLLM does."""

    def evaluate(self, task: Any, episode: Episode) -> EvalOutput: ...
