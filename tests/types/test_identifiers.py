"""Identifiers survive ':' inside task ids and role names."""

from __future__ import annotations

import pytest

from rllm import DataError, Episode, Step, TrajectoryGroup
from rllm.types import DEFAULT_ROLE


def test_episode_id_with_colons_in_task_id() -> None:
    episode = Episode(id="math:gsm8k:42:3")
    assert episode.task_id == "math:gsm8k:42"
    assert episode.rollout_idx == 3


def test_episode_id_without_rollout_index_is_an_error() -> None:
    with pytest.raises(DataError, match="rollout index"):
        _ = Episode(id="no-index").rollout_idx


def test_group_built_from_parts_keeps_both_parts() -> None:
    group = TrajectoryGroup.for_task("math:gsm8k:42", "solver:v2", [])
    assert group.group_id == "math:gsm8k:42:solver:v2"
    assert group.group_role == "solver:v2"
    assert group.group_task_id == "math:gsm8k:42"


def test_group_role_from_metadata_when_only_the_id_is_given() -> None:
    group = TrajectoryGroup(group_id="a:b:solver", metadata=[{"task_id": "a:b"}])
    assert group.group_role == "solver"
    assert group.group_task_id == "a:b"


def test_group_without_role_has_default_role() -> None:
    group = TrajectoryGroup(group_id="task7")
    assert group.group_role == DEFAULT_ROLE
    assert group.group_task_id == "task7"


def test_step_rejects_logprobs_of_wrong_length() -> None:
    with pytest.raises(DataError, match="2 logprobs for 3 response tokens"):
        Step(response_ids=[1, 2, 3], logprobs=[-0.1, -0.2])
