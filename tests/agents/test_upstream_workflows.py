"""rLLM's own workflow files (tests/fixtures/rllm_upstream, copied as they are) import and run against rllm's API.

The single-turn, multi-turn and cumulative workflows run an agent and environment of this
test's own to their ``TerminationEvent``; ``SimpleWorkflow`` imports (it also needs rLLM's
``Workflow.reset`` and ``commit`` to run).
"""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from rllm.agents.agent import BaseAgent
from rllm.engine import ModelOutput, RolloutEngine
from rllm.engine.chat import render_chatml
from rllm.environments.base.base_env import BaseEnv
from rllm.types import Action, Step, Trajectory
from rllm.workflows.workflow import TerminationEvent, TerminationReason, Workflow

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "rllm_upstream"


def upstream(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"rllm_upstream_{name}", FIXTURES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("name", "cls"),
    [
        ("simple_workflow", "SimpleWorkflow"),
        ("single_turn_workflow", "SingleTurnWorkflow"),
        ("multi_turn_workflow", "MultiTurnWorkflow"),
        ("cumulative_workflow", "CumulativeWorkflow"),
    ],
)
def test_rllms_workflow_file_imports_and_its_class_is_a_workflow(name: str, cls: str) -> None:
    assert issubclass(getattr(upstream(name), cls), Workflow)


class Guesser(BaseAgent):
    """Asks the model for a number; each answer is one step, the environment's hint the next message."""

    def __init__(self, question: str = "Guess a number.") -> None:
        self.question = question
        self.reset()

    def reset(self) -> None:
        self._trajectory = Trajectory()
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

    def update_from_model(self, response: str, **kwargs: Any) -> Action:
        self.messages.append({"role": "assistant", "content": response})
        self._trajectory.steps.append(Step(chat_completions=list(self.messages), model_response=response))
        return Action(action=response)


class Secret(BaseEnv):
    """Done when the guess is ``secret``; otherwise says higher or lower."""

    def __init__(self, secret: int = 3) -> None:
        self.secret = secret

    def reset(self, task: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        return (task or {}).get("question", "Guess a number."), {}

    def step(self, action: Any) -> tuple[Any, float, bool, dict[str, Any]]:
        guess = int(action.action)
        if guess == self.secret:
            return None, 1.0, True, {}
        return ("higher" if guess < self.secret else "lower"), 0.0, False, {}

    @staticmethod
    def from_dict(info: dict[str, Any]) -> Secret:
        return Secret(**info)


class Counting(RolloutEngine):
    """Answers 1, 2, 3, ... and records what each call was given."""

    max_response_length = 100

    def __init__(self, finish_reason: str = "stop") -> None:
        self.finish_reason = finish_reason
        self.calls: list[tuple[list[dict[str, Any]], dict[str, Any]]] = []

    async def _get_model_response(self, messages: list[dict[str, Any]], **kwargs: Any) -> ModelOutput:
        self.calls.append((messages, kwargs))
        text = str(len(self.calls))
        return ModelOutput(text=text, content=text, completion_ids=[len(self.calls)], finish_reason=self.finish_reason)


def run_to_termination(workflow: Workflow, task: dict[str, Any]) -> TerminationReason:
    with pytest.raises(TerminationEvent) as ended:
        asyncio.run(workflow.run(task, "task-1:0"))
    return ended.value.reason


def test_single_turn_workflow_runs_one_model_call_and_one_environment_step() -> None:
    cls = upstream("single_turn_workflow").SingleTurnWorkflow
    engine = Counting()
    workflow = cls(agent_cls=Guesser, env_cls=Secret, env_args={"secret": 1}, rollout_engine=engine)
    assert run_to_termination(workflow, {"question": "Pick 1."}) is TerminationReason.ENV_DONE
    assert engine.calls == [
        ([{"role": "user", "content": "Pick 1."}], {"application_id": "task-1:0", "skip_special_tokens": True})
    ]
    [step] = workflow.agent.trajectory.steps
    assert (step.model_response, step.reward, step.done) == ("1", 1.0, True)


def test_multi_turn_workflow_runs_until_the_environment_is_done_or_the_turns_run_out() -> None:
    cls = upstream("multi_turn_workflow").MultiTurnWorkflow
    engine = Counting()
    workflow = cls(agent_cls=Guesser, env_cls=Secret, env_args={"secret": 3}, max_steps=5, rollout_engine=engine)
    assert run_to_termination(workflow, {}) is TerminationReason.ENV_DONE
    assert [step.model_response for step in workflow.agent.trajectory.steps] == ["1", "2", "3"]
    assert [step.reward for step in workflow.agent.trajectory.steps] == [0.0, 0.0, 1.0]
    assert engine.calls[2][0][-1] == {"role": "user", "content": "higher"}  # the environment's answer to turn 2

    short = cls(agent_cls=Guesser, env_cls=Secret, env_args={"secret": 3}, max_steps=2, rollout_engine=Counting())
    assert run_to_termination(short, {}) is TerminationReason.MAX_TURNS_EXCEEDED
    cut = cls(agent_cls=Guesser, env_cls=Secret, rollout_engine=Counting(finish_reason="length"))
    assert run_to_termination(cut, {}) is TerminationReason.MAX_RESPONSE_LENGTH_EXCEEDED


class ChatML:
    """A ``chat_parser`` over rllm's ChatML helper (rLLM's parsers take ``is_first_msg``; ChatML has no use for it)."""

    def parse(self, messages: list[dict[str, Any]], add_generation_prompt: bool = False, **kwargs: Any) -> str:
        return render_chatml(messages, add_generation_prompt=add_generation_prompt)


class Characters:
    """A tokenizer with one token per character."""

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return [ord(c) for c in text]


def test_cumulative_workflow_shrinks_the_budget_by_what_the_conversation_grew() -> None:
    cls = upstream("cumulative_workflow").CumulativeWorkflow
    engine = Counting()
    engine.chat_parser, engine.tokenizer = ChatML(), Characters()
    workflow = cls(agent_cls=Guesser, env_cls=Secret, env_args={"secret": 2}, rollout_engine=engine)
    assert run_to_termination(workflow, {"question": "Go."}) is TerminationReason.ENV_DONE
    # Turn 2's prompt adds "1<|im_end|>\n" (12 characters) to the assistant header, then a user turn
    # "<|im_start|>user\nhigher<|im_end|>\n" (34) and a new header "<|im_start|>assistant\n" (22): 68 in all.
    assert [kwargs["max_tokens"] for _, kwargs in engine.calls] == [100, 100 - 68]
