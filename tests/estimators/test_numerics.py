"""Presets reproduce each framework's printed numbers; numerics policies and float32 accuracy."""

from __future__ import annotations

import warnings
from contextlib import nullcontext

import numpy as np
import pytest

import rllm
from rllm.errors import EstimatorOutputError, GroupError
from rllm.estimators.numerics import PRESETS, resolve_numerics
from rllm.toolkit import kernel, numpy_only


def grpo(rewards: list[float], ids: list[object] | None = None, **options: object) -> list[float]:
    return rllm.compute_advantages("grpo", rewards, ids or [0] * len(rewards), **options).tolist()


@pytest.mark.parametrize(
    ("preset", "first", "rest"),
    [
        # mean 0.25; population std sqrt(3)/4 = 0.433013: 0.75 / 0.433014 = 1.732047, -0.25 / 0.433014 = -0.577349
        ("rllm", 1.732047, -0.577349),
        # unbiased std sqrt(0.75 / 3) = 0.5: 0.75 / 0.500001 = 1.499997, -0.25 / 0.500001 = -0.499999
        ("verl", 1.499997, -0.499999),
        ("skyrl", 1.499997, -0.499999),
        # eps 1e-4: 0.75 / 0.5001 = 1.499700, -0.25 / 0.5001 = -0.499900
        ("trl", 1.499700, -0.499900),
        # eps 1e-9: 1.5, -0.5
        ("openrlhf", 1.5, -0.5),
    ],
)
def test_presets_reproduce_each_framework_on_one_winner_in_four(preset: str, first: float, rest: float) -> None:
    assert grpo([1, 0, 0, 0], preset=preset) == pytest.approx([first, rest, rest, rest], rel=2e-6)


def test_presets_compute_in_the_frameworks_precision() -> None:
    assert rllm.compute_advantages("grpo", [1, 0], [0, 0]).dtype == np.float64
    for preset in ("verl", "skyrl", "trl", "openrlhf"):
        assert rllm.compute_advantages("grpo", [1, 0], [0, 0], preset=preset).dtype == np.float32
    assert rllm.compute_advantages("grpo", [1, 0], [0, 0], preset="verl", dtype="float64").dtype == np.float64


def test_single_trajectory_policies() -> None:
    # raw: baseline 0, std 1 -> 3 / (1 + 1e-6)
    assert grpo([3.0], ["solo"]) == pytest.approx([3 / (1 + 1e-6)])
    assert grpo([3.0], ["solo"], single="zero") == [0.0]
    assert grpo([3.0], ["solo"], preset="trl") == [0.0]
    with pytest.raises(GroupError, match=r"'grpo'.*'solo'"):
        grpo([3.0, 1.0, 0.0], ["solo", "pair", "pair"], single="error")
    # RLOO keeps the raw reward in rLLM and verl, SkyRL gives 0 (an estimator-specific preset exception)
    assert rllm.compute_advantages("rloo", [3.0], [0]).tolist() == [3.0]
    assert rllm.compute_advantages("rloo", [3.0], [0], preset="verl").tolist() == [3.0]
    assert rllm.compute_advantages("rloo", [3.0], [0], preset="skyrl").tolist() == [0.0]
    assert grpo([3.0], [0], preset="skyrl") == pytest.approx([3.0], rel=1e-5)


def test_zero_variance_policy() -> None:
    # three equal rewards: the float mean 0.30000000000000004 / 3 differs from 0.1 by rounding, so with
    # eps 0 the rounding residue divided by itself gives -1 for every trajectory; "zero" gives 0
    assert grpo([0.1, 0.1, 0.1], eps=0.0) == pytest.approx([-1.0, -1.0, -1.0])
    assert grpo([0.1, 0.1, 0.1], eps=0.0, zero_variance="zero") == [0.0, 0.0, 0.0]
    # a real spread is not mistaken for a constant group: [1, 1.5] -> +-1
    assert grpo([1.0, 1.5], eps=0.0, zero_variance="zero") == pytest.approx([-1.0, 1.0])


@pytest.mark.parametrize("path", ["fast", "numpy"])
def test_zero_over_zero_is_refused_naming_the_group_without_numpy_warnings(path: str) -> None:
    """Exactly equal rewards with eps=0 leave 0/0: a clear error naming the group, on either kernel path."""
    if path == "fast" and kernel("group_centre") is None:
        pytest.skip("the fast plugin is not active: numba is not installed (pip install 'rllm[fast]')")
    with numpy_only() if path == "numpy" else nullcontext(), warnings.catch_warnings():
        warnings.simplefilter("error")  # a RuntimeWarning from numpy would fail the test
        with pytest.raises(EstimatorOutputError, match=r"2 non-finite advantage\(s\), first in group 'b'"):
            grpo([1.0, 0.0, 2.0, 2.0], ["a", "a", "b", "b"], eps=0.0)


def test_float32_keeps_tiny_spreads_by_centring_first() -> None:
    rewards = np.array([1.0, 1.00001], dtype=np.float32)
    # in float32 1.00001 is 1.0000100136; half the spread d = 5.0068e-6 (population std = d):
    # d / (d + 1e-6) = 0.833524
    got = rllm.compute_advantages("grpo", rewards, [0, 0], dtype="float32")
    assert got.tolist() == pytest.approx([-0.833524, 0.833524], rel=1e-4)
    # unbiased std d * sqrt(2) = 7.0807e-6 (verl): d / (7.0807e-6 + 1e-6) = 0.619638
    got = rllm.compute_advantages("grpo", rewards, [0, 0], preset="verl")
    assert got.dtype == np.float32
    assert got.tolist() == pytest.approx([-0.619638, 0.619638], rel=1e-4)


def test_epsilon_aliases_and_explicit_options_beat_the_preset() -> None:
    assert resolve_numerics("verl", episilon=0.5).eps == 0.5
    assert resolve_numerics("verl", epsilon=0.25).eps == 0.25
    assert resolve_numerics("trl", std="population").std == "population"
    assert resolve_numerics().whiten == "std" and PRESETS["verl"].whiten == "var_add"
    # grpo with eps 0.5 on [1, 0]: (0.5) / (0.5 + 0.5) = 0.5
    assert grpo([1, 0], epsilon=0.5) == pytest.approx([0.5, -0.5])
