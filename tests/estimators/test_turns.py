"""turn_grpo: each turn's Monte Carlo return against the same turn of the group's other rollouts, by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

import rllm

# A group of three: A solves at turn 0 and stops, B solves at turn 1, C fails three turns.
STEP_REWARDS = [[1.0], [0.0, 1.0], [0.0, 0.0, 0.0]]


def turn_grpo(**options: object) -> list[list[float]]:
    result = rllm.compute_advantages("turn_grpo", [1.0, 1.0, 0.0], [0, 0, 0], step_rewards=STEP_REWARDS, **options)
    return [row.tolist() for row in result.rows()]


def test_all_rollouts_baseline_by_hand() -> None:
    # Returns (gamma 1): A [1], B [1, 1], C [0, 0, 0].
    # Turn 0: [1, 1, 0], mean 2/3, population std sqrt(2)/3 -> +-(1/3, 1/3, -2/3) / (sqrt(2)/3).
    # Turn 1: A has ended and counts 0: [0, 1, 0], mean 1/3, same std -> B (2/3), C (-1/3) over it.
    # Turn 2: [0, 0, 0] -> 0.
    s = math.sqrt(2) / 3 + 1e-6
    expected = [[(1 / 3) / s], [(1 / 3) / s, (2 / 3) / s], [(-2 / 3) / s, (-1 / 3) / s, 0.0]]
    for got, want in zip(turn_grpo(), expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)


def test_survivors_baseline_compares_only_rollouts_that_reached_the_turn() -> None:
    # Without std: turn 0 mean 2/3; turn 1 compares B (1) and C (0), mean 1/2; turn 2 is C alone.
    got = turn_grpo(baseline="survivors", norm_adv_by_std_in_grpo=False, single="zero")
    assert got == [[pytest.approx(1 / 3)], [pytest.approx(1 / 3), 0.5], [pytest.approx(-2 / 3), -0.5, 0.0]]
    # The same turns under "all": turn 1 also counts A's 0, mean 1/3.
    got = turn_grpo(norm_adv_by_std_in_grpo=False)
    assert got == [[pytest.approx(1 / 3)], [pytest.approx(1 / 3), pytest.approx(2 / 3)], [-2 / 3, -1 / 3, 0.0]]


def test_discount_reaches_back_over_turns() -> None:
    # gamma 0.5: B's returns [0.5, 1]; turn 0 [1, 0.5, 0] has mean 1/2.
    got = turn_grpo(gamma=0.5, norm_adv_by_std_in_grpo=False)
    assert got[0] == [0.5] and got[1][0] == 0.0 and got[2][0] == -0.5
