"""rLLM's workflow files as tests load them (the unmodified copies in tests/fixtures/rllm_upstream), and an agent."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

from rllm.agents.agent import BaseAgent
from rllm.types import DEFAULT_TRAJ_NAME, Action, Step, Trajectory

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "rllm_upstream"


def upstream(name: str) -> ModuleType:
    """The module of rLLM's file ``name``.py, loaded under a name of its own."""
    spec = importlib.util.spec_from_file_location(f"rllm_upstream_{name}", FIXTURES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class ConversingAgent(BaseAgent):
    """Keeps the conversation; each reply is a step built from its text, the environment's answer the next message.

    ``reply_content`` is what the history keeps of a reply (the reply itself by default).
    """

    trajectory_name = DEFAULT_TRAJ_NAME

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._trajectory = Trajectory(name=self.trajectory_name)
        self.messages: list[dict[str, Any]] = []

    @property
    def trajectory(self) -> Trajectory:
        return self._trajectory

    @property
    def chat_completions(self) -> list[dict[str, Any]]:
        return list(self.messages)

    def update_from_env(self, observation: Any, reward: float, done: bool, info: dict[str, Any], **kwargs: Any) -> None:
        if self._trajectory.steps:
            self._trajectory.steps[-1].reward, self._trajectory.steps[-1].done = reward, done
        if observation:
            self.messages.append({"role": "user", "content": str(observation)})

    def reply_content(self, response: str) -> str:
        return response

    def update_from_model(self, response: str, **kwargs: Any) -> Action:
        self.messages.append({"role": "assistant", "content": self.reply_content(response)})
        self._trajectory.steps.append(Step(chat_completions=list(self.messages), model_response=response))
        return Action(action=response)
