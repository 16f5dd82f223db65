"""Precomputed advantages as rLLM handles them: every step ends up with one value per response token."""

from __future__ import annotations

import numpy as np
import pytest

from rllm import AlgorithmConfig, DataError, RLLMWarning, Step, Trajectory, TrajectoryGroup
from rllm.trainer.algorithms.advantage import collect_reward_and_advantage_from_trajectory_groups as collect

PRECOMPUTED = AlgorithmConfig(use_precomputed_advantage=True)


def _group(*steps: Step, group_id: str = "t:student") -> TrajectoryGroup:
    return TrajectoryGroup(trajectories=[Trajectory(uid="u1", steps=list(steps))], group_id=group_id)


def test_a_scalar_is_expanded_to_one_value_per_response_token_on_the_step() -> None:
    step = Step(response_ids=[1, 2, 3], advantage=0.5)
    numpy_scalar = Step(response_ids=[4, 5], advantage=np.float32(-1.0))  # type: ignore[arg-type]
    metrics = collect([_group(step, numpy_scalar)], PRECOMPUTED)
    assert step.advantage == [0.5, 0.5, 0.5]
    assert numpy_scalar.advantage == [-1.0, -1.0]
    # Tokens 0.5, 0.5, 0.5, -1, -1: mean -0.1.
    assert metrics["advantage/student/mean"] == pytest.approx(-0.1)


def test_a_list_of_the_wrong_length_is_replaced_by_zeros_on_the_step() -> None:
    wrong = Step(response_ids=[1, 2, 3], advantage=[1.0, 2.0])
    right = Step(response_ids=[4], advantage=(3.0,))  # type: ignore[arg-type]
    with pytest.warns(RLLMWarning, match=r"'t:student'.*step 0 has 2 per-token advantages for 3 response tokens"):
        metrics = collect([_group(wrong, right)], PRECOMPUTED)
    assert wrong.advantage == [0.0, 0.0, 0.0]  # what the backend trains on is what the warning says
    assert right.advantage == [3.0]
    assert metrics["advantage/student/max"] == 3.0
    assert metrics["advantage/student/fraction_zero"] == pytest.approx(3 / 4)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), [0.5, float("-inf")]])
def test_a_nonfinite_precomputed_advantage_is_an_error_naming_the_group(bad: object) -> None:
    group = _group(Step(response_ids=[1, 2], advantage=bad), group_id="gsm8k-7:judge")  # type: ignore[arg-type]
    with pytest.raises(DataError, match=r"Group 'gsm8k-7:judge', trajectory 'u1', step 0 has a NaN or infinite"):
        collect([group], PRECOMPUTED)


@pytest.mark.parametrize("bad", ["0.5", {"a": 1.0}, True, [["nested"]], ["x"]])
def test_other_types_are_a_clear_error(bad: object) -> None:
    with pytest.raises(DataError, match=r"Group 't:student', trajectory 'u1', step 0: step\.advantage"):
        collect([_group(Step(response_ids=[1], advantage=bad))], PRECOMPUTED)  # type: ignore[arg-type]


def test_steps_without_an_advantage_get_zeros_beside_steps_that_have_one() -> None:
    missing = Step(response_ids=[1, 2], advantage=None)
    collect([_group(Step(response_ids=[3], advantage=1.0), missing)], PRECOMPUTED)
    assert missing.advantage == [0.0, 0.0]
