"""Multi-turn episodes on the transformers backend: rLLM's unmodified multi-turn workflows with this test's agent.

The agent answers a text digit task; the environment says "Wrong, answer again." until the
answer is right or the turns run out, so most episodes have several steps. Each step's prompt
extends the previous step's prompt and reply token for token, so a trajectory trains as one
row: the replies carry the loss, the environment's words between them do not.
"""

from __future__ import annotations

import asyncio
import itertools
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from extras import skip_module_without

skip_module_without("torch", "transformers", "safetensors", install="pip install 'rllm[transformers]' (CI does)")

import torch
from omegaconf import DictConfig
from upstream import ConversingAgent, upstream

from rllm.engine import ModelOutput
from rllm.environments.base.base_env import BaseEnv
from rllm.errors import RLLMWarning, WorkflowError
from rllm.tasks import TEXT_TASKS, text_reward
from rllm.trainer import AgentTrainer, TrainerState, UnifiedTrainer
from rllm.trainer.logging import METRICS_FILE, read_metrics
from rllm.types import Episode, Step, Trajectory, TrajectoryGroup
from rllm.workflows.workflow import Workflow

MakeConfig = Callable[..., DictConfig]
TASKS = TEXT_TASKS["text_digit_max"]()[:6]
AGAIN = "Wrong, answer again."


class Answerer(ConversingAgent):
    """Answers the task; ``edit_history`` keeps another text of each reply, as a template that rewrites turns does."""

    trajectory_name = "solver"

    def __init__(self, edit_history: bool = False) -> None:
        self.edit_history = edit_history
        super().__init__()

    def reply_content(self, response: str) -> str:
        return f"I said: {response}" if self.edit_history else response


class AskAgain(BaseEnv):
    """The task's question; right (reward 1, done) or asked again."""

    def __init__(self) -> None:
        self.task: dict[str, Any] = {}

    def reset(self, task: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        self.task = dict(task or {})
        return self.task.get("question", ""), {}

    def step(self, action: Any) -> tuple[Any, float, bool, dict[str, Any]]:
        if text_reward(self.task, action.action) > 0:
            return None, 1.0, True, {}
        return AGAIN, 0.0, False, {}

    @staticmethod
    def from_dict(info: dict[str, Any]) -> AskAgain:
        return AskAgain()


WORKFLOWS = {
    "single": ("single_turn_workflow", "SingleTurnWorkflow"),
    "multi": ("multi_turn_workflow", "MultiTurnWorkflow"),
    "cumulative": ("cumulative_workflow", "CumulativeWorkflow"),
}


def _workflow(kind: str) -> type:
    name, cls = WORKFLOWS[kind]
    return getattr(upstream(name), cls)  # type: ignore[no-any-return]


WORKFLOW_ARGS = {"agent_cls": Answerer, "env_cls": AskAgain, "max_steps": 3}


def _trainer(make: MakeConfig, workflow: str, model: Path | None, **agent_args: Any) -> UnifiedTrainer:
    """The warm start replies in the format and ends its turn; untrained tiny needs room to sample its EOS.

    rLLM's cumulative workflow spends ``max_response_length`` on the whole conversation (the
    environment's turns too), so it gets room for several turns.
    """
    room = 120 if model is None or workflow == "cumulative" else 12
    chosen = "rllm.transformers.tokenizer=text" if model is None else f"rllm.transformers.model={model}"
    config = make(chosen, f"rllm.transformers.max_new_tokens={room}")
    args = {**WORKFLOW_ARGS, "agent_args": agent_args}
    return UnifiedTrainer(None, config, _workflow(workflow), TASKS, TASKS, args, progress=False)


def _episodes(trainer: UnifiedTrainer, tasks: list[dict[str, Any]]) -> list[Episode]:
    engine = trainer.agent_workflow_engine
    return asyncio.run(engine.execute_tasks(tasks, [task["uid"] for task in tasks]))


def _groups(episodes: list[Episode]) -> list[TrajectoryGroup]:
    return [TrajectoryGroup(trajectories=list(ep.trajectories), task_id=ep.id, role="solver") for ep in episodes]


def _extends(step: Step, before: Step) -> bool:
    history = [*before.prompt_ids, *before.response_ids]
    return list(step.prompt_ids[: len(history)]) == history


@pytest.mark.parametrize("workflow", ["multi", "cumulative"])
def test_a_trajectorys_turns_share_a_row_where_only_the_replies_carry_loss(
    tiny_config: MakeConfig, warm_start: Path, workflow: str
) -> None:
    trainer = _trainer(tiny_config, workflow, warm_start)
    try:
        episodes = _episodes(trainer, TASKS * 2)
        state = TrainerState(trajectory_groups=_groups(episodes))
        batch = trainer.backend.transform_to_backend_batch(state)
    finally:
        trainer.shutdown()
    trajectories = [t for ep in episodes for t in ep.trajectories]
    assert sum(len(t.steps) >= 2 for t in trajectories) >= 4  # the untrained model is mostly wrong: several turns
    breaks = sum(not _extends(later, earlier) for t in trajectories for earlier, later in itertools.pairwise(t.steps))
    assert batch.rows == len(trajectories) + breaks
    assert state.metrics["batch/history_breaks"] == breaks
    assert state.metrics["batch/steps_per_row"] == pytest.approx(sum(len(t.steps) for t in trajectories) / batch.rows)
    expected = torch.zeros_like(batch.mask)
    for step, span in zip(batch.steps, batch.spans, strict=True):
        assert batch.ids[span.row, span.start + 1 : span.stop + 1].tolist() == step.response_ids
        assert torch.allclose(batch.rollout_logps[span.row, span.start : span.stop], torch.tensor(step.logprobs))
        expected[span.row, span.start : span.stop] = 1
    assert torch.equal(batch.mask, expected)  # the prompts and the environment's turns: mask 0
    for row in range(batch.rows):  # between two replies of a row sit exactly the next prompt's new tokens
        spans = [(s, step) for s, step in zip(batch.spans, batch.steps, strict=True) if s.row == row]
        for (before, _), (after, step) in itertools.pairwise(spans):
            between = batch.ids[row, before.stop + 1 : after.start + 1].tolist()
            assert between == step.prompt_ids[before.stop + 1 :]
            assert AGAIN in trainer.backend.tokenizer.decode(between)


@pytest.mark.parametrize("model", ["tiny", "warm start"])
def test_every_turns_ids_and_log_probs_are_what_a_fresh_forward_pass_gives(
    tiny_config: MakeConfig, warm_start: Path, model: str
) -> None:
    trainer = _trainer(tiny_config, "multi", None if model == "tiny" else warm_start)
    try:
        episodes = _episodes(trainer, TASKS * 2)
        tokenizer, network = trainer.backend.tokenizer, trainer.backend.model
        network.eval()
        steps = [(ep, t, i) for ep in episodes for t in ep.trajectories for i in range(len(t.steps))]
        assert sum(i > 0 for _, _, i in steps) >= 3
        for episode, trajectory, index in steps:
            step = trajectory.steps[index]
            messages = step.chat_completions[:-1]  # what the model was asked: the conversation before its reply
            template = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=False)
            assert step.prompt_ids == list(template)  # one character a token: keeping the sampled ids changes nothing
            ids = torch.tensor([step.prompt_ids + step.response_ids])
            with torch.no_grad():
                log_p = torch.log_softmax(network(input_ids=ids).logits[0, :-1].float(), dim=-1)
            fresh = log_p.gather(-1, ids[0, 1:, None]).squeeze(-1)[len(step.prompt_ids) - 1 :]
            assert torch.allclose(fresh, torch.tensor(step.logprobs), atol=1e-5, rtol=0), (episode.id, index)
            assert isinstance(step.model_output, ModelOutput) and step.weight_version == 0
    finally:
        trainer.shutdown()


def test_a_rewritten_history_trains_each_turn_alone_and_is_said_once(tiny_config: MakeConfig, warm_start: Path) -> None:
    trainer = _trainer(tiny_config, "multi", warm_start, edit_history=True)
    try:
        episodes = _episodes(trainer, TASKS)
        trajectories = [t for ep in episodes for t in ep.trajectories]
        later_turns = sum(len(t.steps) - 1 for t in trajectories)
        assert later_turns >= 3
        with pytest.warns(RLLMWarning, match=r": \d+ step\(s\) of step 0 were not sampled from"):
            state = TrainerState(trajectory_groups=_groups(episodes))
            batch = trainer.backend.transform_to_backend_batch(state)
        again = TrainerState(trajectory_groups=_groups(episodes))
        with warnings.catch_warnings():
            warnings.simplefilter("error", RLLMWarning)
            trainer.backend.transform_to_backend_batch(again)  # said once a run; the metric counts every step
    finally:
        trainer.shutdown()
    assert state.metrics["batch/history_breaks"] == later_turns == again.metrics["batch/history_breaks"]
    assert batch.rows == sum(len(t.steps) for t in trajectories)
    assert "trajectory 'solver', step 1" in batch.history_breaks[0]


@pytest.mark.parametrize("workflow", ["single", "multi", "cumulative"])
def test_rllms_agent_workflows_train_through_agent_trainer(tmp_path: Path, warm_start: Path, workflow: str) -> None:
    run = tmp_path / "run"
    AgentTrainer(
        workflow_class=_workflow(workflow),
        workflow_args={
            "agent_cls": Answerer,
            "env_cls": AskAgain,
            **({} if workflow == "single" else {"max_steps": 3}),
        },
        train_dataset=TASKS,
        val_dataset=TASKS,
        backend="transformers",
        config=[
            "rllm.transformers.device=cpu",
            f"rllm.transformers.model={warm_start}",
            f"rllm.transformers.max_new_tokens={120 if workflow == 'cumulative' else 12}",
            f"rllm.trainer.output_dir={run}",
            "rllm.trainer.logger=[jsonl]",
            "rllm.data.train_batch_size=3",
            "rllm.rollout.n=4",
            "rllm.trainer.total_batches=2",
            "rllm.trainer.test_freq=0",
            "rllm.trainer.val_before_train=false",
        ],
    ).train()
    train = [r for r in read_metrics(run / METRICS_FILE) if r["kind"] == "train"]
    assert [r["step"] for r in train] == [1, 2]
    assert all(r["actor/tokens"] > 0 for r in train)
    turns = [r["batch/steps_per_row"] for r in train]  # one turn a row for one turn; several for conversations
    assert all(t == 1.0 for t in turns) if workflow == "single" else all(t > 1.0 for t in turns)


class NoIds(Workflow):
    """Builds its step from an answer that carries text only, as a broken engine would give."""

    async def run(self, task: dict[str, Any], uid: str, **kwargs: Any) -> Episode:
        output = ModelOutput(text="7", content="7", finish_reason="stop")
        step = Step(chat_completions=[{"role": "user", "content": task["question"]}], model_output=output)
        return Episode(trajectories=[Trajectory(name="solver", steps=[step], reward=1.0)], is_correct=True)


def test_a_model_output_without_ids_stops_the_run_naming_workflow_task_and_field(tiny_config: MakeConfig) -> None:
    config = tiny_config("rllm.transformers.tokenizer=text")
    trainer = UnifiedTrainer(None, config, NoIds, TASKS, TASKS, {}, progress=False)
    try:
        with pytest.raises(WorkflowError) as raised:
            trainer.fit()
    finally:
        trainer.shutdown()
    message = str(raised.value)
    assert message.startswith("Workflow NoIds failed on task ") and "\n" not in message
    assert any(repr(task["uid"]) in message for task in TASKS)
    assert "step 0 of trajectory 'solver' has a ModelOutput without completion_ids" in message
    assert not list(Path(str(config.rllm.trainer.output_dir)).glob("**/*.safetensors"))  # nothing trained or written


def test_a_step_with_a_replys_text_and_no_ids_is_refused_naming_it() -> None:
    from rllm_transformers.batch import pack_rows

    step = Step(chat_completions=[{"role": "user", "content": "2 or 7?"}], model_response="7")
    group = TrajectoryGroup(trajectories=[Trajectory(name="solver", steps=[step])], task_id="t1", role="solver")
    expected = r"Workflow W produced step 0 of group 't1:solver' \(trajectory 'solver'\) with a reply's text but no"
    with pytest.raises(WorkflowError, match=expected):
        pack_rows([group], {"solver": "vanilla"}, 0, torch.device("cpu"), 10, "Workflow W")
