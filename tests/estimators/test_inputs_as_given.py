"""Inputs are taken as given or refused, never reinterpreted.

Group labels of different types never merge; any hashable label works; estimators get
read-only inputs so a caller's arrays never change; finite rewards of any size give finite,
correct advantages.
"""

from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np
import pytest

import rllm
from rllm.errors import EstimatorFailedError, GroupError, RewardError
from rllm.plugins.manager import PluginManager


@pytest.mark.parametrize(
    "labels",
    [
        [1, "1", 1, "1"],
        [True, "True", True, "True"],
        [b"a", "a", b"a", "a"],
        [None, "None", None, "None"],
    ],
    ids=["int-str", "bool-str", "bytes-str", "none-str"],
)
def test_labels_of_different_types_are_different_groups(labels: list[Any]) -> None:
    # Two groups, [1, 3] and [0, 4]: RLOO gives each reward minus the other one.
    advantages = rllm.compute_advantages("rloo", [1.0, 0.0, 3.0, 4.0], labels)
    assert np.asarray(advantages).tolist() == [-2.0, -4.0, 2.0, 4.0]


@pytest.mark.parametrize(
    "labels",
    [
        [("q", 1), ("q", 2), ("q", 1), ("q", 2)],
        [frozenset({1}), frozenset({2}), frozenset({1}), frozenset({2})],
        [("q", 1, "long"), ("q",), ("q", 1, "long"), ("q",)],
    ],
    ids=["tuples", "frozensets", "ragged-tuples"],
)
def test_any_hashable_label_groups_by_equality(labels: list[Any]) -> None:
    advantages = rllm.compute_advantages("rloo", [1.0, 0.0, 3.0, 4.0], labels)
    assert np.asarray(advantages).tolist() == [-2.0, -4.0, 2.0, 4.0]


def test_unhashable_label_is_refused_naming_it() -> None:
    with pytest.raises(GroupError, match=r"Group label \[1, 2\] is not hashable"):
        rllm.compute_advantages("rloo", [1.0, 0.0], [[1, 2], "b"])


@pytest.mark.parametrize("style", ["batch", "grouped"])
def test_an_estimator_calling_sys_exit_fails_by_name_and_ctrl_c_still_stops(
    plugin_manager: PluginManager, style: str
) -> None:
    def leaving(*_: Any, **__: Any) -> None:
        sys.exit(0)

    def interrupted(*_: Any, **__: Any) -> None:
        raise KeyboardInterrupt

    rllm.register_rllm_adv_estimator("leaving", style=style, options=())(leaving)
    rllm.register_rllm_adv_estimator("interrupted", style=style, options=())(interrupted)
    match = r"Estimator 'leaving' \(.+\) called sys.exit\(0\)"
    with pytest.raises(EstimatorFailedError, match=match):
        rllm.compute_advantages("leaving", [1.0, 0.0], [0, 0])
    with pytest.raises(EstimatorFailedError, match=match):  # the list API
        rllm.get_rllm_adv_estimator("leaving")(rewards=[np.array([1.0, 0.0])])
    with pytest.raises(KeyboardInterrupt):
        rllm.compute_advantages("interrupted", [1.0, 0.0], [0, 0])


def test_callers_arrays_are_never_changed_and_in_place_estimators_fail_loudly(plugin_manager: PluginManager) -> None:
    def in_place(batch: rllm.AdvantageBatch) -> np.ndarray:
        batch.rewards -= batch.rewards.mean()
        return batch.rewards

    rllm.register_rllm_adv_estimator("in_place", style="batch", options=())(in_place)
    rewards = np.array([1.0, 3.0])
    with pytest.raises(EstimatorFailedError, match=r"'in_place'.*wrote into its input arrays.*read-only"):
        rllm.compute_advantages("in_place", rewards, [0, 0])
    assert rewards.tolist() == [1.0, 3.0]
    assert rewards.flags.writeable  # the caller's array itself keeps its flags

    for name in ("grpo", "rloo", "reinforce", "gpg", "maxrl", "reinforce_plus_plus_baseline"):
        rllm.compute_advantages(name, rewards, [0, 0])
        assert rewards.tolist() == [1.0, 3.0], name


@pytest.mark.parametrize("scale", [1.0, 1e150, 1e200, 1e300])
@pytest.mark.parametrize("estimator", ["grpo", "grpo_batch_std", "reinforce_plus_plus_baseline"])
def test_huge_finite_rewards_give_the_same_normalised_advantages(scale: float, estimator: str) -> None:
    # One group [s, 0, 0, 0]: mean s/4, population std s*sqrt(3)/4, so GRPO gives sqrt(3) and -1/sqrt(3)
    # whatever s is (eps is negligible next to the std); the batch-whitened ones give the same here.
    advantages = rllm.compute_advantages(estimator, [scale, 0.0, 0.0, 0.0], [0] * 4)
    expected = [math.sqrt(3), -1 / math.sqrt(3), -1 / math.sqrt(3), -1 / math.sqrt(3)]
    np.testing.assert_allclose(advantages, expected, rtol=1e-5)


def test_sum_overflow_is_scaled_not_infinite() -> None:
    # [1e308, 1e308, 0, 0]: mean 5e307, std 5e307 -> +1, +1, -1, -1.
    np.testing.assert_allclose(rllm.compute_advantages("grpo", [1e308, 1e308, 0.0, 0.0], [0] * 4), [1, 1, -1, -1])


def test_rewards_beyond_float32_are_a_named_error_under_a_float32_preset() -> None:
    with pytest.raises(RewardError, match=r"exceed float32's range.*dtype='float64'"):
        rllm.compute_advantages("grpo", [1e150, 0.0], [0, 0], preset="verl")
