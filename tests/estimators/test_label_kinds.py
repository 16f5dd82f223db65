"""Labels of different kinds never merge: 1, 1.0, True and "1" are four groups, and four tasks to ema_baseline."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import rllm
from rllm.cli.main import main
from rllm.estimators.batch import AdvantageBatch
from rllm.estimators.compute import get_estimator
from rllm.estimators.pipeline import invoke
from rllm.estimators.state import state_factory


def test_int_float_and_bool_labels_are_three_groups() -> None:
    # RLOO by hand within each pair: [1, 0] -> [1, -1], [3, 1] -> [2, -2], [5, 2] -> [3, -3]
    got = rllm.compute_advantages("rloo", [1.0, 0.0, 3.0, 1.0, 5.0, 2.0], [1, 1, 1.0, 1.0, True, True])
    assert got.tolist() == [1.0, -1.0, 2.0, -2.0, 3.0, -3.0]


def test_kinds_interleaved_are_not_taken_for_runs() -> None:
    # int 1 holds positions 0 and 3 (rewards 1 and 5): RLOO [-4, 4]; "a" and True are groups of one
    got = rllm.compute_advantages("rloo", [1.0, 0.0, 3.0, 5.0], [1, "a", True, 1])
    assert got[[0, 3]].tolist() == [-4.0, 4.0]


def test_numpy_and_python_scalars_of_one_kind_are_one_group() -> None:
    got = rllm.compute_advantages("rloo", [1.0, 0.0], [np.int64(2), 2])
    assert got.tolist() == [1.0, -1.0]


def test_ema_baseline_keeps_int_and_string_tasks_apart() -> None:
    entry = get_estimator("ema_baseline")
    factory = state_factory(entry.target)
    assert factory is not None
    state = factory()
    # step 1: task 1 (int) has mean 1, task "1" mean 0; step 2: task "1" alone, reward 1
    invoke(entry, AdvantageBatch([1.0, 0.0], [1, "1"]), {"decay": 0.5}, state=state)
    second = invoke(entry, AdvantageBatch([1.0], ["1"]), {"decay": 0.5}, state=state).advantages
    assert np.asarray(second).tolist() == [1.0]  # baseline 0 (task "1"'s own), not 1 or 0.5 (merged)


TUPLES = [(1, "a"), (1, "a"), (1.0, "a"), (1.0, "a"), (True, "a"), (True, "a")]
"""Python's == merges these three labels (1 == 1.0 == True); their kinds tell them apart, inside tuples too."""


def test_tuple_labels_keep_their_items_kinds_at_every_door() -> None:
    # RLOO by hand within each pair: [1, 0] -> [1, -1], [3, 1] -> [2, -2], [5, 2] -> [3, -3]
    rewards = [1.0, 0.0, 3.0, 1.0, 5.0, 2.0]
    expected = [1.0, -1.0, 2.0, -2.0, 3.0, -3.0]
    assert rllm.compute_advantages("rloo", rewards, TUPLES).tolist() == expected
    batch = AdvantageBatch(rewards, TUPLES)
    assert batch.n_groups == 3
    assert np.asarray(invoke(get_estimator("rloo"), batch, {}).advantages).tolist() == expected
    frozen = [frozenset(label) for label in TUPLES]
    assert rllm.compute_advantages("rloo", rewards, frozen).tolist() == expected


def test_a_tuple_holding_a_list_is_named() -> None:
    with pytest.raises(rllm.GroupError, match=r"Group label \(1, \[2\]\) is not hashable"):
        rllm.compute_advantages("rloo", [1.0, 0.0], [(1, [2]), (1, [2])])


def test_rollout_file_labels_1_1_0_and_true_are_three_groups(tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    labels = ["1", "1.0", "true"]
    source.write_text("".join(f'{{"group_id": {g}, "reward": {r}}}\n' for g in labels for r in (2, 0)))
    out = tmp_path / "out.jsonl"
    assert main(["advantages", str(source), "-e", "rloo", "-o", str(out)]) == 0
    # RLOO in each pair [2, 0]: 2 - 0 = 2 and 0 - 2 = -2; merged into one group of six it would be 2.4 and -2.4
    assert [json.loads(line)["advantage"] for line in out.read_text().splitlines()] == [2.0, -2.0] * 3
