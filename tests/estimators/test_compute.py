"""rllm.compute_advantages: labels, order, bad input."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import rllm
from rllm import GroupError, MissingInputError, RewardError
from rllm.plugins import PluginManager


def test_string_labels_in_any_order_keep_input_order() -> None:
    # Group "x" = [3, 1] (RLOO: +2, -2), group "y" = [5, 5, 8] (mean 6; RLOO 3/2 * [-1, -1, 2]).
    got = rllm.compute_advantages("rloo", [5.0, 3.0, 5.0, 1.0, 8.0], ["y", "x", "y", "x", "y"])
    np.testing.assert_allclose(got, [-1.5, 2.0, -1.5, -2.0, 3.0])


def test_sparse_and_negative_integer_labels() -> None:
    got = rllm.compute_advantages("rloo", [1.0, 4.0, 2.0, 7.0], [-5, 10**12, -5, 10**12])
    np.testing.assert_allclose(got, [-1.0, -3.0, 1.0, 3.0])


def test_grouped_style_estimator_works_through_flat_entry(plugin_manager: PluginManager) -> None:
    @rllm.register_rllm_adv_estimator("max_gap")
    def max_gap(rewards: list[np.ndarray], **kwargs: Any) -> tuple[list[np.ndarray], list[np.ndarray]]:
        gaps = [g - g.max() for g in rewards]
        return gaps, gaps

    # Group 1 = [2, 5] -> [-3, 0]; group 0 = [4] -> [0]; group 1 sits around group 0 in the input.
    got = rllm.compute_advantages("max_gap", [2.0, 4.0, 5.0], [1, 0, 1])
    np.testing.assert_allclose(got, [-3.0, 0.0, 0.0])


def test_nan_reward_names_its_group() -> None:
    with pytest.raises(RewardError, match="group 'b'"):
        rllm.compute_advantages("grpo", [1.0, 0.0, float("nan")], ["a", "a", "b"])
    with pytest.raises(RewardError, match="group 7"):
        rllm.compute_advantages("grpo", [float("inf")], [7])


def test_length_mismatch_and_shape_errors() -> None:
    with pytest.raises(GroupError, match="3 rewards but 2 group ids"):
        rllm.compute_advantages("grpo", [1.0, 2.0, 3.0], [0, 0])
    with pytest.raises(GroupError, match="1-D"):
        rllm.compute_advantages("grpo", [[1.0, 2.0]], [[0, 0]])


def test_empty_input_gives_empty_output() -> None:
    got = rllm.compute_advantages("grpo", [], [])
    assert got.shape == (0,)


def test_unknown_option_names_option_and_estimator() -> None:
    with pytest.raises(rllm.ConfigError, match=r"'rloo'.*std_divisor"):
        rllm.compute_advantages("rloo", [1.0, 0.0], [0, 0], std_divisor="unbiased")


def test_missing_field_names_field_and_estimator(plugin_manager: PluginManager) -> None:
    def per_token(batch: rllm.AdvantageBatch) -> np.ndarray:
        return batch.rewards / batch.response_lengths

    plugin_manager.add_estimator(
        "per_token", per_token, plugin_manager.runtime_source("test"), style="batch", requires=["response_lengths"]
    )
    with pytest.raises(MissingInputError, match=r"'per_token'.*'response_lengths'"):
        rllm.compute_advantages("per_token", [1.0], [0])
    np.testing.assert_allclose(
        rllm.compute_advantages("per_token", [1.0, 3.0], [0, 0], response_lengths=[2, 4]), [0.5, 0.75]
    )


def test_other_is_not_a_usable_estimator() -> None:
    with pytest.raises(rllm.EstimatorNotFoundError, match="OTHER only marks a custom estimator"):
        rllm.compute_advantages(rllm.rLLMAdvantageEstimator.OTHER, [1.0], [0])
