"""An agent flow written against the stock ``openai`` client, run by the workflow engine through the gateway.

What the episodes must hold is worked out from the scripted engine's reply (``Answer: 7``):
the task whose ground truth is 7 scores 1, the others 0.
"""

from __future__ import annotations

import asyncio
import math
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from extras import skip_module_without

skip_module_without("openai", install="pip install 'rllm[test]'")

import openai
from scripted_engine import REPLY_IDS, REPLY_LOGPROBS, Scripted

from rllm.errors import ConfigError, WorkflowError
from rllm.eval.types import EvalOutput, Signal
from rllm.gateway import Gateway
from rllm.tasks import text_reward
from rllm.trainer import AgentTrainer
from rllm.trainer.agent_flow import load_attr
from rllm.trainer.engine import WorkflowEngine
from rllm.types import AgentConfig, AgentFlow, Episode, Evaluator, TerminationReason
from rllm.workflows.agent_flow import AgentFlowWorkflow

TASKS = [{"uid": f"t{d}", "question": f"What is {d}?", "ground_truth": d} for d in (7, 3)]


class OpenAIFlow:
    """An agent that knows nothing of rllm: one chat call with the task's question."""

    def __init__(self) -> None:
        self.configs: list[AgentConfig] = []

    def run(self, task: dict[str, Any], config: AgentConfig) -> None:
        self.configs.append(config)
        client = openai.OpenAI(base_url=config.base_url, api_key="unused", max_retries=0)
        client.chat.completions.create(model=config.model, messages=[{"role": "user", "content": task["question"]}])


class Grader:
    def evaluate(self, task: dict[str, Any], episode: Episode) -> EvalOutput:
        reward = text_reward(task, episode.trajectories[0].steps[-1].model_response)
        return EvalOutput(reward=reward, is_correct=reward == 1.0, signals=[Signal("format", 1.0)])


def _episodes(gateway: Gateway, flow: Any, evaluator: Any, policy: str = "fail", tasks: Any = TASKS) -> list[Episode]:
    with ThreadPoolExecutor(4) as threads:
        engine = WorkflowEngine(
            AgentFlowWorkflow,
            {"agent_flow": flow, "evaluator": evaluator, "gateway": gateway, "executor": threads},
            Scripted(),
            failure_policy=policy,
        )
        return asyncio.run(engine.execute_tasks(tasks, [t["uid"] for t in tasks]))


def test_each_call_is_a_step_and_the_evaluators_reward_is_written_onto_it(gateway: Gateway) -> None:
    flow = OpenAIFlow()
    assert isinstance(flow, AgentFlow) and isinstance(Grader(), Evaluator)
    right, wrong = _episodes(gateway, flow, Grader())
    for episode, reward in ((right, 1.0), (wrong, 0.0)):
        (trajectory,) = episode.trajectories
        (step,) = trajectory.steps
        assert step.response_ids == REPLY_IDS and step.logprobs == REPLY_LOGPROBS
        assert step.prompt_ids == [ord(c) for c in episode.task["question"]]
        assert step.reward == trajectory.reward == reward and episode.is_correct is (reward == 1.0)
        assert episode.termination_reason is TerminationReason.ENV_DONE and episode.metrics["format"] == 1.0
    assert sorted(c.session_uid for c in flow.configs) == ["t3:0", "t7:0"]
    assert all(c.model == "policy" and c.base_url.startswith(gateway.url + "/sessions/") for c in flow.configs)


class AsyncFlow:
    """``arun`` is preferred: it runs on the trainer's loop (here with a blocking client on a thread)."""

    async def arun(self, task: dict[str, Any], config: AgentConfig) -> None:
        await asyncio.to_thread(OpenAIFlow().run, task, config)


def test_an_async_flow_is_awaited(gateway: Gateway) -> None:
    right, _ = _episodes(gateway, AsyncFlow(), Grader())
    assert right.trajectories[0].steps[0].reward == 1.0


class Raises:
    def run(self, task: dict[str, Any], config: AgentConfig) -> None:
        raise RuntimeError("tool server down")


class Silent:
    def run(self, task: dict[str, Any], config: AgentConfig) -> None:
        return None


class NaNGrader:
    def evaluate(self, task: dict[str, Any], episode: Episode) -> EvalOutput:
        return EvalOutput(reward=math.nan, is_correct=False)


class TemperatureFlow:
    def run(self, task: dict[str, Any], config: AgentConfig) -> None:
        client = openai.OpenAI(base_url=config.base_url, api_key="unused", max_retries=0)
        client.chat.completions.create(model=config.model, messages=[{"role": "user", "content": "x"}], temperature=0.3)


@pytest.mark.parametrize(
    ("flow", "evaluator", "message"),
    [
        (Raises(), Grader(), r"agent flow test_agent_flow.Raises raised RuntimeError: tool server down"),
        (Silent(), Grader(), r"agent flow test_agent_flow.Silent made no model call through config.base_url"),
        (OpenAIFlow(), NaNGrader(), r"NaNGrader gave reward nan on task t[37]:0; give a finite number .*\)\. Fix"),
        (TemperatureFlow(), Grader(), r"BadRequestError.*\(the gateway answered: Scripted does not take temperature\)"),
    ],
)
def test_a_failing_flow_or_evaluator_is_an_episode_error_under_the_failure_policy(
    gateway: Gateway, flow: Any, evaluator: Any, message: str
) -> None:
    with pytest.raises(WorkflowError, match=message) as failure:
        _episodes(gateway, flow, evaluator, "fail")
    assert "\n" not in str(failure.value)
    assert _episodes(gateway, flow, evaluator, "drop_group") == []  # both groups dropped, the run goes on


def test_bad_flow_and_evaluator_names_are_one_line_naming_the_key(tmp_path: Any) -> None:
    with pytest.raises(ConfigError, match=r"^rllm.agent_flow.flow='no_such_mod:Flow': module 'no_such_mod' does not"):
        load_attr("no_such_mod:Flow", "rllm.agent_flow.flow")
    with pytest.raises(ConfigError, match=r"module 'rllm.tasks' has no attribute 'Nope'"):
        load_attr("rllm.tasks:Nope", "rllm.agent_flow.evaluator")
    with pytest.raises(ConfigError, match=r"is not module:attr"):
        load_attr("rllm.tasks", "rllm.agent_flow.flow")
    with pytest.raises(ConfigError, match=r"agent_flow=...\) needs evaluator="):
        AgentTrainer(agent_flow=OpenAIFlow())
    with pytest.raises(ConfigError, match=r"evaluator .*Silent has no evaluate"):
        AgentTrainer(agent_flow=OpenAIFlow(), evaluator=Silent(), train_dataset=TASKS).train()
    overrides = ["rllm.agent_flow.flow=no_such_mod:Flow", "rllm.agent_flow.evaluator=test_agent_flow:Grader"]
    with pytest.raises(ConfigError, match=r"module 'no_such_mod' does not import"):
        AgentTrainer(config=overrides).train()
    with pytest.raises(ConfigError, match=r"rllm.agent_flow.evaluator is set but rllm.agent_flow.flow is not"):
        AgentTrainer(config=["rllm.agent_flow.evaluator=test_agent_flow:Grader"]).train()


def test_a_flow_module_in_the_current_directory_imports_without_pythonpath(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As under the `rllm` console script, whose path starts at its bin directory: the current one is searched too."""
    import os
    import sys

    (tmp_path / "flows_beside_me.py").write_text("class Flow:\n    answer = 42\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", os.getcwd(), str(tmp_path))])
    assert load_attr("flows_beside_me:Flow.answer", "rllm.agent_flow.flow") == 42
    assert sys.path[-1] == str(tmp_path)  # last: an installed package of the same name would win
    with pytest.raises(ConfigError, match=r"does not import .*run from the directory that holds it"):
        load_attr("not_here_either:Flow", "rllm.agent_flow.flow")
