"""Identifiers survive ':' inside task ids and role names; step and trajectory ids are unique version-4 UUIDs."""

from __future__ import annotations

import os
import uuid

import pytest

from rllm import DataError, Episode, Step, Trajectory, TrajectoryGroup
from rllm.types import DEFAULT_ROLE
from rllm.types.ids import BATCH


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


def test_step_and_trajectory_ids_are_version_4_uuids_and_distinct_across_batches() -> None:
    """Three batches' worth: each id is what ``str(uuid.UUID(...))`` writes, version 4, RFC 4122's variant."""
    ids = [Step().id for _ in range(3 * BATCH)] + [Trajectory().uid for _ in range(10)]
    assert len(set(ids)) == len(ids)
    for text in ids:
        parsed = uuid.UUID(text)
        assert str(parsed) == text and parsed.version == 4 and parsed.variant == uuid.RFC_4122
    hexes = [text.replace("-", "") for text in ids]
    digits = "".join(h[:12] + h[13:16] + h[17:] for h in hexes)  # all but the version and the variant digit
    counts = [digits.count(c) for c in "0123456789abcdef"]
    expected = len(digits) / 16  # each about 2,900 times; 5 standard deviations are about 260
    assert all(abs(n - expected) < 5 * (expected * 15 / 16) ** 0.5 for n in counts), counts


def test_a_forked_child_never_hands_out_its_parents_ids() -> None:
    """The parent holds a batch of ready ids when it forks; the child's next ids are none of the parent's."""
    Step()  # a batch is ready
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through the pipe
        os.write(write, " ".join(Step().id for _ in range(50)).encode())
        os._exit(0)
    os.close(write)
    theirs = set(os.read(read, 1 << 16).decode().split())
    os.waitpid(child, 0)
    mine = {Step().id for _ in range(50)}
    assert len(theirs) == 50 and not mine & theirs
