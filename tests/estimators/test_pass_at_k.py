"""PKPO (``pkpo``, option ``pass_at_k``): values worked out by hand from the subset definition."""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import rllm


def test_binary_group_by_hand() -> None:
    # n=4, k=2, rewards [1, 0, 0, 0]. Of the C(4,2)=6 pairs, the 3 containing the correct rollout have best 1.
    # Correct rollout: in 3 pairs, all best 1 -> s = 3/6. A wrong one: in 3 pairs, one with best 1 -> s = 1/6.
    # Leave-one-out baselines (k/n) rho(others): without the correct one 0; without a wrong one the others
    # [1, 0, 0] have pass@2 = 1 - C(2,2)/C(3,2) = 2/3, so (2/4)(2/3) = 1/3.
    got = rllm.compute_advantages("pkpo", [1.0, 0.0, 0.0, 0.0], [0] * 4, pass_at_k=2)
    np.testing.assert_allclose(got, [0.5, 1 / 6 - 1 / 3, 1 / 6 - 1 / 3, 1 / 6 - 1 / 3])


def test_continuous_group_by_hand() -> None:
    # n=3, k=2, rewards [0.5, 0.2, 0.9]: pairs {.5,.2}->.5, {.5,.9}->.9, {.2,.9}->.9.
    # s(0.5) = (.5+.9)/3, s(0.2) = (.5+.9)/3, s(0.9) = (.9+.9)/3; baselines (2/3) * best of the other two:
    # 0.9, 0.9 and 0.5.
    got = rllm.compute_advantages("pkpo", [0.5, 0.2, 0.9], ["q"] * 3, pass_at_k=2)
    np.testing.assert_allclose(got, [1.4 / 3 - 0.6, 1.4 / 3 - 0.6, 1.8 / 3 - 1 / 3])


def test_k_one_is_leave_one_out_over_n() -> None:
    rewards, ids = [1.0, 0.0, 3.0, 2.0, 5.0], [0, 0, 1, 1, 1]
    got = rllm.compute_advantages("pkpo", rewards, ids)
    sizes = np.array([2, 2, 3, 3, 3])
    # k=1: s_i = r_i / n and the baseline is (1/n) * mean of the others, so A_i = (r_i - mean of others) / n.
    np.testing.assert_allclose(got, rllm.compute_advantages("rloo", rewards, ids) / sizes)


def test_a_group_smaller_than_k_is_refused() -> None:
    with pytest.raises(rllm.GroupError, match=r"pass_at_k=3 needs at least 3 rollouts per group; group 'b' has 2"):
        rllm.compute_advantages("pkpo", [1.0, 0.0, 1.0, 0.0, 1.0], ["a", "a", "a", "b", "b"], pass_at_k=3)


def brute_force(rewards: list[float], k: int) -> list[float]:
    """The definition: each rollout's share of the k-subsets' best rewards, minus (k/n) rho of the others."""
    n = len(rewards)
    subsets = list(combinations(range(n), k))
    out = []
    for i in range(n):
        share = sum(max(rewards[j] for j in s) for s in subsets if i in s) / len(subsets)
        others = [r for j, r in enumerate(rewards) if j != i]
        rest = list(combinations(others, k))
        baseline = (k / n) * (sum(max(s) for s in rest) / len(rest)) if rest else 0.0
        out.append(share - baseline)
    return out


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=1, max_size=7), st.integers(1, 4))
def test_matches_the_subset_definition(values: list[int], k: int) -> None:
    rewards = [float(v) / 2 for v in values]
    assume(len(rewards) >= k)
    got = rllm.compute_advantages("pkpo", rewards, [0] * len(rewards), pass_at_k=k)
    np.testing.assert_allclose(got, brute_force(rewards, k), atol=1e-12)
