"""rLLM's ``AgentFlow``: an agent program that turns a task into an episode through an OpenAI-compatible URL.

It knows nothing of the trainer; :mod:`rllm.workflows.agent_flow` runs it as a workflow, with an
:class:`~rllm.types.AgentConfig` whose URL records every model call as a step. ``rllm.types``
exports it too, as rLLM does.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from rllm.types import AgentConfig, Episode, Trajectory

__all__ = ["AgentFlow"]


@runtime_checkable
class AgentFlow(Protocol):
    """An agent program that turns one task into an episode by calling the model at ``config.base_url``.

    Implement ``run(task, config)`` (it runs in a worker thread, so blocking clients such as
    ``openai.OpenAI`` are fine) or ``async arun(task, config)`` (preferred when both exist). It
    may return None (the episode is its recorded calls), a :class:`Trajectory` or an
    :class:`Episode`; trajectories without steps receive the recorded calls.
    """

    def run(self, task: Any, config: AgentConfig) -> Episode | Trajectory | None: ...
