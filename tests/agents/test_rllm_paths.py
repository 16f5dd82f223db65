"""rLLM's workflow-author API imports from rLLM's paths, without torch, and behaves as rLLM's does."""

from __future__ import annotations

import asyncio
import importlib
import json
import subprocess
import sys
from typing import Any

import pytest

from rllm.agents.agent import BaseAgent
from rllm.engine import ModelOutput, RolloutEngine
from rllm.environments.base.base_env import BaseEnv
from rllm.errors import ClassNotRegisteredError, DataError, NotShippedError
from rllm.rewards import RewardFunction, RewardOutput, zero_reward
from rllm.trainer import env_agent_mappings
from rllm.types import Action, Episode, Step, Trajectory
from rllm.workflows.timing_mixin import TimingTrackingMixin
from rllm.workflows.workflow import TerminationEvent, TerminationReason, Workflow

RLLM_PATHS = {  # what rLLM's workflows, agents and environments import (rllm-org/rllm 9beb6e0f)
    "rllm.engine": ["ModelOutput", "RolloutEngine"],
    "rllm.engine.rollout": ["ModelOutput", "RolloutEngine", "TokenInput", "TokenOutput", "Tokenizer"],
    "rllm.engine.rollout.rollout_engine": ["ModelOutput", "RolloutEngine"],
    "rllm.engine.rollout.types": ["TokenInput", "TokenOutput", "Tokenizer"],
    "rllm.workflows": ["Workflow", "TerminationReason", "TerminationEvent", "TimingTrackingMixin"],
    "rllm.workflows.workflow": ["TerminationEvent", "TerminationReason", "Workflow"],
    "rllm.workflows.timing_mixin": ["TimingTrackingMixin"],
    "rllm.agents": ["BaseAgent", "Action", "Step", "Trajectory", "Episode"],
    "rllm.agents.agent": ["Action", "BaseAgent", "Episode", "Step", "Trajectory", "TrajectoryGroup"],
    "rllm.environments.base": ["BaseEnv"],
    "rllm.environments.base.base_env": ["BaseEnv"],
    "rllm.rewards": ["RewardInput", "RewardOutput", "RewardType", "RewardFunction", "zero_reward"],
    "rllm.rewards.reward_fn": ["RewardFunction", "zero_reward"],
    "rllm.rewards.reward_types": ["RewardInput", "RewardOutput", "RewardType"],
    "rllm.types": ["Action", "Episode", "Step", "Trajectory", "TrajectoryGroup"],
    "rllm.trainer.env_agent_mappings": [
        "ENV_CLASS_MAPPING", "AGENT_CLASS_MAPPING", "WORKFLOW_CLASS_MAPPING", "ENV_CLASSES", "AGENT_CLASSES",
        "WORKFLOW_CLASSES",
    ],
}  # fmt: skip


@pytest.mark.parametrize(("module", "name"), [(m, n) for m, names in RLLM_PATHS.items() for n in names])
def test_rllms_name_imports_from_rllms_path(module: str, name: str) -> None:
    assert getattr(importlib.import_module(module), name) is not None


def test_the_paths_import_without_torch_or_transformers() -> None:
    code = (
        f"import sys\nfor m in {sorted(RLLM_PATHS)!r}: __import__(m)\n"
        "print([m for m in ('torch', 'transformers', 'ray') if m in sys.modules])"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(loaded.stdout.replace("'", '"')) == []


def test_termination_reason_has_rllms_members_and_values() -> None:
    assert {r.name: r.value for r in TerminationReason} == {
        "MAX_PROMPT_LENGTH_EXCEEDED": "max_prompt_length_exceeded",
        "MAX_RESPONSE_LENGTH_EXCEEDED": "max_response_length_exceeded",
        "ENV_DONE": "env_done",
        "MAX_TURNS_EXCEEDED": "max_turns_exceeded",
        "TIMEOUT": "timeout",
        "UNKNOWN": "unknown",
        "ERROR": "error",
    }


def test_termination_event_carries_its_reason() -> None:
    with pytest.raises(TerminationEvent) as raised:
        raise TerminationEvent(TerminationReason.ENV_DONE)
    assert raised.value.reason is TerminationReason.ENV_DONE and "env_done" in str(raised.value)
    assert TerminationEvent().reason is TerminationReason.UNKNOWN
    assert TerminationEvent("timeout").reason is TerminationReason.TIMEOUT
    with pytest.raises(DataError, match="TerminationEvent got reason 'done'; use one of max_prompt_length_exceeded"):
        TerminationEvent("done")


class Counter(BaseAgent):
    def __init__(self) -> None:
        self._trajectory = Trajectory()

    def reset(self) -> None:
        self._trajectory = Trajectory()

    @property
    def trajectory(self) -> Trajectory:
        return self._trajectory


def test_base_agent_is_abstract_in_reset_and_says_what_to_implement() -> None:
    with pytest.raises(TypeError, match="reset"):
        BaseAgent()  # type: ignore[abstract]
    agent = Counter()
    assert agent.chat_completions == [] and agent.get_current_state() is None
    agent.trajectory.steps.append(Step(model_response="a"))
    assert agent.get_current_state().model_response == "a"
    with pytest.raises(NotImplementedError, match="Counter must implement update_from_model"):
        agent.update_from_model("x")
    with pytest.raises(NotImplementedError, match="Counter must implement update_from_env"):
        agent.update_from_env(None, 0.0, False, {})


def test_base_env_is_gyms_shape() -> None:
    class Coin(BaseEnv):
        def reset(self) -> tuple[Any, dict[str, Any]]:
            return "heads?", {}

        def step(self, action: Any) -> tuple[Any, float, bool, dict[str, Any]]:
            return None, float(action == "heads"), True, {}

        @staticmethod
        def from_dict(info: dict[str, Any]) -> Coin:
            return Coin()

    with pytest.raises(TypeError, match="from_dict"):
        type("Half", (BaseEnv,), {"reset": Coin.reset, "step": Coin.step})()
    env = Coin.from_dict({})
    assert env.idx is None
    env.idx = 3
    assert env.idx == 3 and env.step("heads") == (None, 1.0, True, {}) and env.close() is None
    assert Coin.is_multithread_safe() is True


def test_rewards_are_rllms_shape() -> None:
    assert isinstance(zero_reward, RewardFunction) and zero_reward({}, "x") == RewardOutput(reward=0.0)
    assert RewardOutput(reward=1.0, is_correct=True).metadata == {}
    with pytest.raises(TypeError):
        RewardOutput(1.0)  # type: ignore[misc]  # keyword-only, as in rLLM
    with pytest.raises(NotShippedError, match=r"^math_reward_fn is one of rLLM's graders .* pass your own reward func"):
        from rllm.rewards import math_reward_fn  # noqa: F401
    with pytest.raises(NotShippedError, match="f1_reward_fn"):
        from rllm.rewards.reward_fn import f1_reward_fn  # noqa: F401
    with pytest.raises(AttributeError):
        importlib.import_module("rllm.rewards.reward_fn").no_such_name  # noqa: B018


def test_an_action_in_a_step_is_written_as_json() -> None:
    step = Step(action=Action(action={"move": "left"}), model_output=ModelOutput(text="left", completion_ids=[3]))
    data = json.loads(json.dumps(step.to_dict()))
    assert data["action"] == {"action": {"move": "left"}}
    assert data["model_output"]["text"] == "left" and data["model_output"]["completion_ids"] == [3]


def test_a_registered_class_is_found_and_rllms_own_names_say_what_to_do() -> None:
    agents = env_agent_mappings.AGENT_CLASS_MAPPING
    assert (
        env_agent_mappings.AGENT_CLASSES is agents and "math_agent" not in agents and agents.get("math_agent") is None
    )
    with pytest.raises(
        ClassNotRegisteredError, match=r"^rllm.trainer.env_agent_mappings.AGENT_CLASS_MAPPING\['math_age"
    ):
        agents["math_agent"]
    with pytest.raises(ClassNotRegisteredError, match=r"is rLLM's MathAgent \(rllm.agents.math_agent\), which rllm do"):
        agents["math_agent"]
    with pytest.raises(
        KeyError, match=r"\['counter'\] names no class \(names: code_agent, .*\); pass the class itself"
    ):
        agents["counter"]
    agents["counter"] = Counter
    try:
        assert agents["counter"] is Counter and list(agents) == ["counter"] and len(agents) == 1
    finally:
        del agents["counter"]
    with pytest.raises(DataError, match=r"\['x'\] = 'Counter': register a class under a string name"):
        agents["x"] = "Counter"  # type: ignore[assignment]


def test_a_workflow_name_resolves_once_its_module_exists(monkeypatch: pytest.MonkeyPatch) -> None:
    workflows = env_agent_mappings.WORKFLOW_CLASS_MAPPING
    monkeypatch.setattr(workflows, "_rllm_names", {"mine": "rllm.workflows.timing_mixin:TimingTrackingMixin"})
    monkeypatch.setattr(workflows, "_classes", {})
    assert list(workflows) == ["mine"] and workflows["mine"] is TimingTrackingMixin


class Sleepy(RolloutEngine):
    async def _get_model_response(self, messages: list[dict[str, Any]], **kwargs: Any) -> ModelOutput:
        await asyncio.sleep(0.05)
        return ModelOutput(text="ok")


class Timed(TimingTrackingMixin, Workflow):
    async def run(self, task: dict[str, Any], uid: str, **kwargs: Any) -> Episode | None:
        self.reset(task, uid)
        await self.timed_llm_call([{"role": "user", "content": "a"}])
        await self.timed_env_call(lambda seconds: __import__("time").sleep(seconds), 0.05)
        await self.timed_llm_call([{"role": "user", "content": "b"}])
        return None


def test_timing_mixin_times_model_and_environment_calls_per_step() -> None:
    workflow = Timed(rollout_engine=Sleepy())
    asyncio.run(workflow.run({}, "t:0"))
    answered = [{"role": "assistant", "content": "1"}]  # a step without messages is dropped by postprocessing
    episode = Episode(
        trajectories=[Trajectory(steps=[Step(chat_completions=answered), Step(chat_completions=answered)])]
    )
    workflow.add_reward_time(0.5)
    episode = workflow.postprocess_episode(episode)
    timing = episode.info["timing"]
    assert timing["llm_time"] >= 0.1 and timing["env_time"] >= 0.05 and timing["reward_time"] == 0.5
    assert timing["total_time"] >= timing["llm_time"] + timing["env_time"]
    first, second = (step.info["timing"] for step in episode.trajectories[0].steps)
    assert first["llm_time"] >= 0.05 and first["env_time"] >= 0.05  # the environment call belongs to step 1
    assert second["llm_time"] >= 0.05 and second["env_time"] == 0.0
    trajectory = episode.trajectories[0].info
    assert trajectory["num_steps"] == 2 and trajectory["timing"]["start_timestamp"] == first["start_timestamp"]
    assert trajectory["timing"]["end_timestamp"] == second["end_timestamp"] and first["start_timestamp"].endswith(
        "+00:00"
    )
