"""The list API takes one 1-D reward array per group: other shapes are refused, never flattened."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from rllm.errors import GroupError
from rllm.experimental.common import advantage as list_api


def run(rewards: Any) -> Any:
    return list_api.get_rllm_adv_estimator("grpo")(rewards=rewards)


def test_a_flat_array_of_rewards_is_refused_naming_the_estimator() -> None:
    # before: each reward became a group of one (advantage 0 everywhere)
    with pytest.raises(GroupError, match=r"'grpo': rewards is a flat array of 4 rewards"):
        run(np.array([1.0, 0.0, 1.0, 0.0]))


def test_a_flat_list_of_numbers_is_refused_naming_the_group() -> None:
    with pytest.raises(GroupError, match=r"'grpo': reward group 0 is a single number"):
        run([1.0, 0.0])


def test_a_two_dimensional_group_is_refused_not_flattened() -> None:
    with pytest.raises(GroupError, match=r"'grpo': reward group 1 is an array of shape \(2, 2\)"):
        run([np.array([1.0, 0.0]), np.array([[1.0, 0.0], [0.0, 0.0]])])


def test_a_two_dimensional_array_of_equal_groups_is_one_group_per_row() -> None:
    # rows [1, 0] and [3, 3]: RLOO by hand (each reward minus the other's) gives [1, -1] and [0, 0]
    advantages, _ = list_api.get_rllm_adv_estimator("rloo")(rewards=np.array([[1.0, 0.0], [3.0, 3.0]]))
    assert [a.tolist() for a in advantages] == [[1.0, -1.0], [0.0, 0.0]]
