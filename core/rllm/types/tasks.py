"""What a workflow is given and how it stops: the task, an agent's action, an agent flow's settings, the end event.

:class:`AgentConfig` is what rLLM's :class:`~rllm.types.AgentFlow` (an agent program that
knows nothing of the trainer) gets for one episode: the OpenAI-compatible URL it talks to the
model through.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rllm.contract.names import TerminationReason
from rllm.errors import DataError
from rllm.io import jsonable as _jsonable

__all__ = ["Action", "AgentConfig", "Task", "TerminationEvent"]


class TerminationEvent(Exception):
    """Raised in a workflow (or the engine it calls) to end the episode at once, for ``reason`` (rLLM's control flow).

    Not an error: what was committed so far is the episode, and ``reason`` becomes its
    ``termination_reason``.
    """

    def __init__(self, reason: TerminationReason | str = TerminationReason.UNKNOWN) -> None:
        try:
            self.reason = TerminationReason(reason)
        except ValueError:
            raise DataError(
                f"TerminationEvent got reason {reason!r}; use one of {', '.join(r.value for r in TerminationReason)}."
            ) from None
        super().__init__(f"episode terminated: {self.reason.value}")


@dataclass
class Task:
    """One problem instance: its id, what the agent sees, and where its files (verifier) live."""

    id: str
    instruction: str | list[dict[str, Any]]
    metadata: dict[str, Any] = field(default_factory=dict)
    dataset_dir: Path = field(default_factory=Path)
    sub_dir: Path | None = None

    @property
    def task_dir(self) -> Path:
        """``dataset_dir / sub_dir`` for a task with its own directory, else ``dataset_dir``."""
        return self.dataset_dir / self.sub_dir if self.sub_dir else self.dataset_dir


@dataclass
class Action:
    """What an agent decided, wrapped so that environments and reward functions get one object (rLLM's ``Action``)."""

    action: Any = None

    def to_dict(self) -> dict[str, Any]:
        return {"action": _jsonable(self.action, "Action.action")}


@dataclass
class AgentConfig:
    """What an :class:`~rllm.types.AgentFlow` is given for one episode (rLLM's ``AgentConfig``).

    ``base_url`` is an OpenAI-compatible endpoint of this episode alone (pass it to
    ``openai.OpenAI(base_url=...)``): every call through it is sampled by the trainer's policy
    and recorded as a step of the episode. ``model`` is the name to put in requests.
    ``sampling_params`` is informational: what sampling the trainer applies.
    """

    base_url: str
    model: str
    session_uid: str
    metadata: dict[str, Any] = field(default_factory=dict)
    is_validation: bool = False
    sampling_params: dict[str, Any] = field(default_factory=dict)
