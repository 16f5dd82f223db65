"""rLLM's ``SimpleWorkflow`` at rLLM's path: one model call on the task's prompt, scored by a reward function.

Code written for rLLM (``from rllm.workflows.simple_workflow import SimpleWorkflow``, or
``WORKFLOW_CLASS_MAPPING["simple_workflow"]``) runs unchanged: the prompt is the task's
``messages``, else its ``question``, ``prompt`` or ``problem`` as one user message; the step
keeps the model's whole ``ModelOutput`` (the sampled ids and log-probs the
update trains on); the episode ends ``MAX_RESPONSE_LENGTH_EXCEEDED`` when the answer was cut
by the token limit, ``ENV_DONE`` otherwise.
"""

from __future__ import annotations

from typing import Any

from rllm.agents.agent import BaseAgent
from rllm.engine import RolloutEngine
from rllm.errors import DataError
from rllm.rewards.reward_fn import RewardFunction
from rllm.types import Action, Episode, Step, TerminationEvent, TerminationReason, Trajectory
from rllm.workflows.workflow import Workflow

PROMPT_KEYS = ("question", "prompt", "problem")
"""Task keys read, in this order, as the one user message when the task has no ``messages``."""


class SimpleAgent(BaseAgent):
    """Holds the workflow's one trajectory; the workflow writes its step."""

    def __init__(self, **kwargs: Any) -> None:
        self._trajectory = Trajectory()

    def reset(self) -> None:
        self._trajectory = Trajectory()

    def update_from_model(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        """Nothing to take in: the workflow builds the step."""

    def update_from_env(self, *args: Any, **kwargs: Any) -> None:
        """No environment."""

    @property
    def trajectory(self) -> Trajectory:
        return self._trajectory


def prompt_messages(task: dict[str, Any]) -> list[dict[str, Any]]:
    """The chat the model answers: the task's ``messages``, or its first prompt key as a user message."""
    if task.get("messages") is not None:
        return list(task["messages"])
    for key in PROMPT_KEYS:
        if task.get(key) is not None:
            return [{"role": "user", "content": task[key]}]
    raise DataError(
        f"SimpleWorkflow needs a task with 'messages' or one of {', '.join(map(repr, PROMPT_KEYS))}; this one has "
        f"{', '.join(map(repr, task)) or 'no keys'}."
    )


class SimpleWorkflow(Workflow):
    """One model call per task, its answer scored by ``reward_function(task, Action(answer))``."""

    def __init__(self, rollout_engine: RolloutEngine, reward_function: RewardFunction, **kwargs: Any) -> None:
        super().__init__(rollout_engine, **kwargs)
        self.agent = SimpleAgent()
        self.reward_function = reward_function

    async def run(self, task: dict[str, Any], uid: str, **kwargs: Any) -> Episode | None:
        self.reset(task, uid)
        messages = prompt_messages(task)
        output = await self.rollout_engine.get_model_response(messages, application_id=uid, **kwargs)
        action = Action(action=output.content)
        scored = self.reward_function(task, action)
        answer = {"role": "assistant", "content": output.content, "reasoning": output.reasoning}
        self.agent.trajectory.steps.append(
            Step(
                chat_completions=[*messages, answer],
                thought=output.reasoning,
                action=action,
                reward=scored.reward,
                model_output=output,
            )
        )
        self.commit(agent=self.agent, reset=True)
        cut = output.finish_reason == "length"
        raise TerminationEvent(TerminationReason.MAX_RESPONSE_LENGTH_EXCEEDED if cut else TerminationReason.ENV_DONE)
