"""What an evaluator returns for one episode, at rLLM's path; the protocol is :class:`rllm.types.Evaluator`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rllm.types import Evaluator as Evaluator  # the protocol, where rLLM also imports it from

__all__ = ["EvalOutput", "Signal"]


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
