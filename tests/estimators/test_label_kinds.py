"""Labels of different kinds never merge: 1, 1.0, True and "1" are four groups, and four tasks to ema_baseline."""

from __future__ import annotations

import numpy as np

import rllm
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
