"""One episode's gateway session: the engine that answers its calls, the loop they run on, the steps recorded."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field

from rllm.engine import RolloutEngine
from rllm.types import Step, TerminationReason

__all__ = ["Session"]


@dataclass
class Session:
    """One episode's calls: the engine that answers them, the loop they run on, and the steps recorded."""

    id: str
    engine: RolloutEngine
    loop: asyncio.AbstractEventLoop
    base_url: str
    steps: list[Step] = field(default_factory=list)
    termination: TerminationReason | None = None
    """Set when a call ended the episode (a prompt over the engine's limit): the episode ends with it."""
    errors: list[str] = field(default_factory=list)
    """Why calls were refused or failed, for the episode's error when the flow then fails."""
    running_since: float | None = None
    """``time.monotonic()`` when the episode's ``arun`` last resumed on the loop, None while it awaits (set by
    :func:`rllm.workflows.agent_flow.run_agent_flow`): how the gateway tells a deadlock from a busy loop."""
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def recorded(self) -> list[Step]:
        with self._lock:
            return list(self.steps)

    def record(self, step: Step) -> None:
        with self._lock:
            self.steps.append(step)
