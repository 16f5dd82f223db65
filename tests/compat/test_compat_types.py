"""The data model as rLLM has it today: new fields, JSON round trips, group-id parsing."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rllm import DataError
from rllm.types import Episode, Step, Task, TerminationReason, Trajectory, TrajectoryGroup


def _episode() -> Episode:
    step = Step(
        prompt_ids=[1, 2],
        response_ids=[3, 4, 5],
        logprobs=[-0.1, -0.2, -0.3],
        chat_completions=[{"role": "user", "content": "2+2?"}],
        observation={"board": [1, 2]},
        thought="add",
        action="4",
        model_response="4",
        reward=1.0,
        done=True,
        mc_return=0.5,
        advantage=[0.1, 0.2, 0.3],
        input={"question": "2+2?"},
        output="4",
        model_output={"content": "4", "completion_ids": [3, 4, 5]},
        routing_matrices=["r0", "r1", "r2"],
        weight_version=7,
        metadata={"value": 0.25},
    )
    trajectory = Trajectory(
        uid="traj-1",
        name="solver",
        task={"question": "2+2?"},
        steps=[step, Step(response_ids=[9], advantage=0.5)],
        reward=1.0,
        input={"x": 1},
        output={"answer": 4},
        signals={"accuracy": 1.0},
        metadata={"source": "gsm8k"},
    )
    return Episode(
        id="task:3",
        task={"question": "2+2?"},
        termination_reason=TerminationReason.ENV_DONE,
        is_correct=True,
        trajectories=[trajectory],
        metrics={"solver_acc": 1.0},
        session_id="session-9",
        artifacts={"patch": "diff --git"},
        metadata={"data_source": "gsm8k"},
    )


def test_new_fields_and_metadata_is_info() -> None:
    episode = _episode()
    step = episode.trajectories[0].steps[0]
    assert step.info == {"value": 0.25} and step.metadata is step.info
    assert len(Step().id) == 36 and Step().id != Step().id  # a fresh uuid per step
    assert (step.weight_version, step.routing_matrices, step.input, step.output) == (
        7,
        ["r0", "r1", "r2"],
        {"question": "2+2?"},
        "4",
    )
    trajectory = episode.trajectories[0]
    assert trajectory.metadata == {"source": "gsm8k"} and trajectory.signals == {"accuracy": 1.0}
    assert episode.metadata is episode.info and episode.session_id == "session-9"
    episode.metadata = {"replaced": True}
    assert episode.info == {"replaced": True}
    with pytest.raises(DataError, match="both info and metadata"):
        Step(info={"a": 1}, metadata={"b": 2})


def test_episode_round_trips_through_json() -> None:
    episode = _episode()
    text = json.dumps(episode.to_dict())
    again = Episode.from_dict(json.loads(text))
    assert again == episode
    assert again.termination_reason is TerminationReason.ENV_DONE
    assert again.trajectories[0].steps[1].advantage == 0.5
    assert again.trajectories[0].steps[0].id == episode.trajectories[0].steps[0].id
    assert Trajectory.from_dict(json.loads(json.dumps(episode.trajectories[0].to_dict()))) == episode.trajectories[0]
    step = episode.trajectories[0].steps[0]
    assert Step.from_dict(json.loads(json.dumps(step.to_dict()))) == step


def test_to_dict_uses_rllms_keys_and_from_dict_reads_rllms_dicts() -> None:
    step = _episode().trajectories[0].steps[0].to_dict()
    assert step["info"] == {"value": 0.25} and "metadata" not in step
    # A step dict as rLLM writes it: no id/input/output, metadata under "info".
    upstream = {k: v for k, v in step.items() if k not in ("id", "input", "output")}
    read = Step.from_dict(upstream)
    assert read.info == {"value": 0.25} and read.response_ids == [3, 4, 5] and read.weight_version == 7
    assert Step.from_dict({"metadata": {"k": 1}}).info == {"k": 1}


def test_numpy_values_become_lists_and_objects_without_json_form_are_named() -> None:
    step = Step(response_ids=[1, 2], advantage=np.array([0.5, -0.5]))  # type: ignore[arg-type]
    assert step.to_dict()["advantage"] == [0.5, -0.5]
    with pytest.raises(DataError, match=r"Step\.observation holds a value of type object"):
        Step(observation=object()).to_dict()
    with pytest.raises(DataError, match="termination_reason 'crashed'"):
        Episode.from_dict({"id": "t:0", "termination_reason": "crashed"})


@pytest.mark.parametrize(
    ("group_id", "task_id", "role"),
    [("t:solver", "t", "solver"), ("t:", "t", "all_groups"), ("t", "t", "all_groups"), ("a:b:solver", "a", "b:solver")],
)
def test_group_id_parsing(group_id: str, task_id: str, role: str) -> None:
    group = TrajectoryGroup(group_id=group_id)
    assert group.task_id == task_id
    assert group.group_task_id == task_id
    assert group.group_role == role
    assert group.weight_version == 0


def test_for_task_keeps_ids_with_colons_exact() -> None:
    group = TrajectoryGroup.for_task("math:gsm8k:42", "judge:v2", [])
    assert (group.task_id, group.group_role, group.group_id) == ("math:gsm8k:42", "judge:v2", "math:gsm8k:42:judge:v2")


def test_trailing_colon_gives_all_groups_metric_keys() -> None:
    from rllm.trainer.algorithms.advantage import AlgorithmConfig, collect_reward_and_advantage_from_trajectory_groups

    group = TrajectoryGroup(
        trajectories=[Trajectory(reward=1.0, steps=[Step()]), Trajectory(reward=0.0, steps=[Step()])], group_id="t:"
    )
    metrics = collect_reward_and_advantage_from_trajectory_groups([group], AlgorithmConfig())
    assert metrics["reward/all_groups/mean"] == 0.5
    assert not any("//" in key for key in metrics)


def test_task_type() -> None:
    task = Task(id="task-001", instruction="Fix the bug", dataset_dir=Path("/data"), sub_dir=Path("task-001"))
    assert task.task_dir == Path("/data/task-001")
    assert Task(id="0", instruction="2+2?", dataset_dir=Path("/data")).task_dir == Path("/data")
