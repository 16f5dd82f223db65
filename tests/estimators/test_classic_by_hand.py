"""The four classic estimators on ragged groups (sizes 1, 2 and 5), with expected values worked out by hand.

Groups, in input order, interleaved on purpose:
    "solo" = [0.7]                 (size 1)
    "pair" = [1, 0]                (size 2: mean 0.5, population std 0.5)
    "five" = [0, 0, 0, 0, 5]       (size 5: mean 1, deviations [-1, -1, -1, -1, 4],
                                    squared deviations sum to 20, population std sqrt(20/5) = 2)
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import rllm

EPS = 1e-6
LABELS = ["five", "pair", "solo", "five", "five", "pair", "five", "five"]
REWARDS = [0.0, 1.0, 0.7, 0.0, 0.0, 0.0, 0.0, 5.0]


def by_position(values: dict[str, list[float]]) -> list[float]:
    """Expected per-group values laid out in the input order above."""
    cursor = {label: iter(v) for label, v in values.items()}
    return [next(cursor[label]) for label in LABELS]


def test_grpo() -> None:
    expected = by_position(
        {
            "solo": [0.7 / (1 + EPS)],  # mean 0, std 1 for a group of one
            "pair": [0.5 / (0.5 + EPS), -0.5 / (0.5 + EPS)],
            "five": [-1 / (2 + EPS)] * 4 + [4 / (2 + EPS)],
        }
    )
    np.testing.assert_allclose(rllm.compute_advantages("grpo", REWARDS, LABELS), expected, rtol=1e-12)


def test_grpo_without_std_normalisation() -> None:
    expected = by_position({"solo": [0.7], "pair": [0.5, -0.5], "five": [-1, -1, -1, -1, 4]})
    got = rllm.compute_advantages("grpo", REWARDS, LABELS, norm_adv_by_std_in_grpo=False)
    np.testing.assert_allclose(got, expected, rtol=1e-12)


def test_rloo() -> None:
    # n/(n-1) * (r - mean): pair 2 * +-0.5; five 5/4 * deviations; a group of one keeps its reward.
    expected = by_position({"solo": [0.7], "pair": [1.0, -1.0], "five": [-1.25] * 4 + [5.0]})
    np.testing.assert_allclose(rllm.compute_advantages("rloo", REWARDS, LABELS), expected, rtol=1e-12)


def test_reinforce() -> None:
    np.testing.assert_array_equal(rllm.compute_advantages("reinforce", REWARDS, LABELS), REWARDS)


def test_reinforce_plus_plus_baseline() -> None:
    # Centred rewards (a group of one has baseline 0): solo 0.7; pair 0.5, -0.5; five -1 x4, 4.
    # Over all 8: mean = 0.7 / 8 = 0.0875; mean of squares = (0.49 + 0.25 + 0.25 + 4 + 16) / 8 = 2.62375;
    # population variance = 2.62375 - 0.0875^2 = 2.61609375.
    std = math.sqrt(2.61609375)
    centred = by_position({"solo": [0.7], "pair": [0.5, -0.5], "five": [-1, -1, -1, -1, 4]})
    expected = [c / (std + EPS) for c in centred]
    got = rllm.compute_advantages("reinforce_plus_plus_baseline", REWARDS, LABELS)
    np.testing.assert_allclose(got, expected, rtol=1e-12)


@pytest.mark.parametrize("estimator", ["grpo", "rloo", "reinforce", "reinforce_plus_plus_baseline"])
def test_documented_list_api_agrees_with_flat_api(estimator: str) -> None:
    groups = [np.array([0.7]), np.array([1.0, 0.0]), np.array([0.0, 0.0, 0.0, 0.0, 5.0])]
    advantages, _ = rllm.get_rllm_adv_estimator(estimator)(rewards=groups)
    flat = rllm.compute_advantages(estimator, np.concatenate(groups), [0, 1, 1, 2, 2, 2, 2, 2])
    np.testing.assert_allclose(np.concatenate(advantages), flat, rtol=1e-12)
