"""rLLM's own workflow files (tests/fixtures/rllm_upstream, copied as they are) import and run against rllm's API.

The single-turn, multi-turn and cumulative workflows run an agent and environment of this
test's own to their ``TerminationEvent``; ``SimpleWorkflow`` runs through the workflow
engine, which turns its ``TerminationEvent`` into the episode it committed.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from upstream import ConversingAgent, upstream

from rllm.engine import ModelOutput, RolloutEngine
from rllm.engine.chat import render_chatml
from rllm.environments.base.base_env import BaseEnv
from rllm.errors import DataError
from rllm.rewards.reward_types import RewardOutput
from rllm.trainer.engine import WorkflowEngine
from rllm.types import Action, Episode, Step, Trajectory
from rllm.workflows.workflow import TerminationEvent, TerminationReason, Workflow


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


class Guesser(ConversingAgent):
    """Asks the model for a number; each answer is one step, the environment's hint the next message."""


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


def says_one(task: dict[str, Any], action: Action) -> RewardOutput:
    return RewardOutput(reward=1.0 if action.action == "1" else 0.0)


def _simple_workflow(where: str) -> type[Workflow]:
    """rLLM's file as it is, or this project's class at rLLM's import path."""
    if where == "rllm's file":
        return upstream("simple_workflow").SimpleWorkflow
    from rllm.workflows.simple_workflow import SimpleWorkflow

    return SimpleWorkflow


@pytest.mark.parametrize("where", ["rllm's file", "rllm.workflows.simple_workflow"])
@pytest.mark.parametrize(
    ("finish_reason", "reason"),
    [("stop", TerminationReason.ENV_DONE), ("length", TerminationReason.MAX_RESPONSE_LENGTH_EXCEEDED)],
)
def test_simple_workflow_through_the_engine_gives_the_episode_it_committed(
    finish_reason: str, reason: TerminationReason, where: str
) -> None:
    cls = _simple_workflow(where)
    engine = WorkflowEngine(cls, {"reward_function": says_one}, Counting(finish_reason), retry_limit=0)
    task = {"question": "Say 1.", "uid": "q"}
    [episode] = asyncio.run(engine.execute_tasks([task], ["q"]))
    assert episode.termination_reason is reason and engine.stats.errors == 0
    assert (episode.id, episode.task, episode.is_correct) == ("q:0", task, True)
    [trajectory] = episode.trajectories
    [step] = trajectory.steps
    assert trajectory.reward == 1.0 and episode.metrics == {"default_traj_name_acc": 1.0}
    assert step.chat_completions[-1] == {"role": "assistant", "content": "1", "reasoning": None}
    assert (step.response_ids, step.weight_version) == ([1], 0)  # taken from the step's model_output


class Scripted(Workflow):
    """Commits one trajectory with the task's step rewards, then ends as the task says."""

    async def run(self, task: dict[str, Any], uid: str, **kwargs: Any) -> Episode | None:
        self.reset(task, uid)
        steps = [Step(chat_completions=[{"role": "user", "content": "x"}], reward=r) for r in task["rewards"]]
        self.commit(name="solver", trajectory=Trajectory(steps=steps))
        if task["end"] == "raise":
            raise RuntimeError("broken tool")
        if task["end"] == "hang":
            await asyncio.Event().wait()
        if task["end"] == "none":
            return None
        raise TerminationEvent(TerminationReason.MAX_TURNS_EXCEEDED)


def test_a_termination_event_is_the_end_of_the_episode_not_an_error() -> None:
    engine = WorkflowEngine(Scripted, rollout_engine=None, retry_limit=2)
    [episode] = asyncio.run(engine.execute_tasks([{"rewards": [0.0, 1.0], "end": "event"}], ["t"]))
    assert episode.termination_reason is TerminationReason.MAX_TURNS_EXCEEDED
    assert episode.info["attempts"] == 1 and engine.stats.errors == 0 and engine.stats.retries == 0
    assert [t.name for t in episode.trajectories] == ["solver"] and episode.trajectories[0].reward == 1.0


def test_step_rewards_are_shaped_then_discounted_and_the_trajectory_keeps_the_raw_sum() -> None:
    workflow = Scripted(rollout_engine=None, gamma=0.5, reward_bonus_coeff=0.5)
    episode = asyncio.run(workflow.run_with_termination_handling({"rewards": [0.0, 0.5, 1.0], "end": "event"}, "u"))
    [trajectory] = episode.trajectories
    # bonus 0.5 * (r[i] - r[i-1]): 0, 0.5 + 0.25, 1 + 0.25; then returns with gamma 0.5 from the end:
    # 1.25, 0.75 + 0.625 = 1.375, 0 + 0.6875
    assert [step.reward for step in trajectory.steps] == [0.6875, 1.375, 1.25]
    assert trajectory.reward == 1.5 and episode.is_correct and episode.id == "u"
    assert episode.metrics == {"solver_acc": 1.5}


def test_run_with_termination_handling_always_gives_an_episode() -> None:
    def run(end: str, **kwargs: Any) -> Episode:
        workflow = Scripted(rollout_engine=None)
        return asyncio.run(workflow.run_with_termination_handling({"rewards": [0.0], "end": end}, "u", **kwargs))

    failed = run("raise")
    assert failed.termination_reason is TerminationReason.ERROR
    assert (failed.info["error"]["type"], failed.info["error"]["message"]) == ("RuntimeError", "broken tool")
    assert run("hang", timeout=0.05).termination_reason is TerminationReason.TIMEOUT
    assert run("none").termination_reason is TerminationReason.UNKNOWN
    assert [len(run(end).trajectories) for end in ("raise", "none")] == [1, 1]
    assert not run("none").is_correct


def test_commit_keeps_copies_of_trajectories_with_steps_and_collect_adds_the_agents_own() -> None:
    workflow = Workflow(rollout_engine=None)
    workflow.agent = Guesser()
    workflow.reset({"question": "q"}, "u")
    workflow.commit(trajectory=Trajectory())  # no steps: not kept
    workflow.agent.update_from_model("4")
    workflow.commit(name="first", agent=workflow.agent, reset=True)
    assert workflow.agent.trajectory.steps == []
    workflow.agent.update_from_model("5")
    episode = workflow.collect_trajectories()
    assert [(t.name, t.steps[0].model_response) for t in episode.trajectories] == [
        ("first", "4"),
        ("default_traj_name", "5"),
    ]
    workflow.commit(agent=workflow.agent)
    assert len(workflow.collect_trajectories().trajectories) == 3 - 1  # the agent's, once committed, is not added twice
    for wrong in ({}, {"agent": workflow.agent, "trajectory": Trajectory()}):
        with pytest.raises(DataError, match=r"Workflow.commit\(\) takes one of agent= or trajectory="):
            workflow.commit(**wrong)


def test_a_committed_trajectory_does_not_change_when_its_agent_goes_on() -> None:
    """Token lists (the step's and its model output's), rewards, info and messages edited afterwards, in place."""
    output = ModelOutput(text="7", prompt_ids=[1, 2], completion_ids=[3], logprobs=[-0.5])
    step = Step(chat_completions=[{"role": "user", "content": "q"}], info={"tries": [1]}, model_output=output)
    step.advantage = [0.25]
    workflow = Workflow(rollout_engine=None)
    workflow.commit(name="kept", trajectory=Trajectory(steps=[step]))
    for ids in (step.prompt_ids, step.response_ids, step.logprobs, step.advantage, output.prompt_ids):
        ids.append(99)
    output.completion_ids.append(99)
    step.reward = 5.0
    step.info["tries"].append(2)
    step.chat_completions[0]["content"] = "changed"
    kept = workflow.collect_trajectories().trajectories[0].steps[0]
    assert (kept.prompt_ids, kept.response_ids, kept.logprobs, kept.advantage) == ([1, 2], [3], [-0.5], [0.25])
    assert (kept.model_output.prompt_ids, kept.model_output.completion_ids) == ([1, 2], [3])
    assert (kept.reward, kept.info, kept.chat_completions[0]["content"]) == (0.0, {"tries": [1]}, "q")
    assert kept.model_output is not output and kept.prompt_ids is not step.prompt_ids


def test_reset_resets_agents_and_environments_and_gives_the_agent_the_task() -> None:
    class Both(Workflow):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.agent, self.env = Guesser(), Secret()

    workflow = Both(rollout_engine=None)
    workflow.agent.update_from_model("1")
    workflow.reset({"question": "q"}, "u")
    assert workflow.agent.trajectory.steps == [] and workflow.agent.trajectory.task == {"question": "q"}
    assert workflow.is_multithread_safe()


def test_simple_workflow_imports_at_rllms_path_and_from_rllms_table() -> None:
    from rllm.trainer.env_agent_mappings import WORKFLOW_CLASS_MAPPING
    from rllm.workflows.simple_workflow import SimpleWorkflow

    assert WORKFLOW_CLASS_MAPPING["simple_workflow"] is SimpleWorkflow


@pytest.mark.parametrize("where", ["rllm's file", "rllm.workflows.simple_workflow"])
@pytest.mark.parametrize(
    ("task", "prompt"),
    [
        ({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "m"}], "question": "q"}, None),
        ({"question": "q", "prompt": "p", "problem": "r"}, "q"),
        ({"prompt": "p", "problem": "r"}, "p"),
        ({"problem": "r"}, "r"),
    ],
)
def test_simple_workflow_reads_the_prompt_keys_in_rllms_order(where: str, task: dict, prompt: str | None) -> None:
    cls = _simple_workflow(where)
    engine = Counting("stop")
    workflow = cls(rollout_engine=engine, reward_function=says_one)
    with pytest.raises(TerminationEvent):
        asyncio.run(workflow.run(dict(task), "u"))
    expected = task["messages"] if prompt is None else [{"role": "user", "content": prompt}]
    assert engine.calls[0][0] == expected


@pytest.mark.parametrize("where", ["rllm's file", "rllm.workflows.simple_workflow"])
def test_simple_workflow_refuses_a_task_without_a_prompt_as_a_value_error(where: str) -> None:
    workflow = _simple_workflow(where)(rollout_engine=Counting("stop"), reward_function=says_one)
    with pytest.raises(ValueError, match="messages"):
        asyncio.run(workflow.run({"answer": 1}, "u"))
