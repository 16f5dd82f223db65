"""Properties that hold by definition, and agreement with the per-group reference implementations."""

from __future__ import annotations

from typing import Any

import estimator_reference as reference
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rllm

settings.register_profile("estimators", max_examples=60, deadline=None)
settings.load_profile("estimators")

rewards_values = st.floats(min_value=-10, max_value=10, allow_nan=False, allow_infinity=False, width=64)
labels = st.one_of(st.integers(-5, 5), st.sampled_from(["a", "b", "task:7", ""]))


@st.composite
def batches(draw: Any, min_group: int = 1) -> tuple[list[float], list[Any]]:
    """Rewards with group labels: any labels, any order, ragged sizes of at least ``min_group``."""
    n_groups = draw(st.integers(1, 6))
    names = draw(st.lists(labels, min_size=n_groups, max_size=n_groups, unique=True))
    ids: list[Any] = []
    for name in names:
        ids += [name] * draw(st.integers(min_group, 7))
    order = draw(st.permutations(range(len(ids))))
    ids = [ids[i] for i in order]
    rewards = draw(st.lists(rewards_values, min_size=len(ids), max_size=len(ids)))
    return rewards, ids


def group_sums(values: np.ndarray, ids: list[Any]) -> list[float]:
    return [float(values[positions].sum()) for positions in reference.by_group(ids).values()]


@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "rloo"])
@given(data=batches(min_group=2))
def test_advantages_sum_to_zero_in_every_group(name: str, data: tuple[list[float], list[Any]]) -> None:
    rewards, ids = data
    advantages = rllm.compute_advantages(name, rewards, ids)
    scale = max(1.0, float(np.abs(advantages).max()))
    assert group_sums(advantages, ids) == pytest.approx([0.0] * len(reference.by_group(ids)), abs=1e-9 * scale)


@given(data=batches(), shift=st.floats(-100, 100))
def test_grpo_ignores_a_constant_added_to_a_group(data: tuple[list[float], list[Any]], shift: float) -> None:
    rewards, ids = data
    target = ids[0]
    shifted = [r + shift if i == target else r for r, i in zip(rewards, ids, strict=True)]
    before = rllm.compute_advantages("grpo", rewards, ids)
    after = rllm.compute_advantages("grpo", shifted, ids)
    others = [k for k, i in enumerate(ids) if i != target]
    assert after[others] == pytest.approx(before[others], abs=1e-9)
    members = [k for k, i in enumerate(ids) if i == target]
    if len(members) > 1:  # a group of one keeps its raw reward by the single="raw" policy
        assert after[members] == pytest.approx(before[members], abs=1e-6)


EQUIVARIANT = [
    ("grpo", {}),
    ("dr_grpo", {}),
    ("grpo_batch_std", {}),
    ("rloo", {}),
    ("reinforce", {}),
    ("reinforce_plus_plus_baseline", {}),
    ("gpg", {}),
    ("maxrl", {}),
    ("mix", {"components": "0.7*grpo + 0.3*rloo"}),
]


@pytest.mark.parametrize(("name", "options"), EQUIVARIANT)
@given(data=batches(), seed=st.integers(0, 2**32 - 1))
def test_permuting_trajectories_permutes_advantages(
    name: str, options: dict[str, Any], data: tuple[list[float], list[Any]], seed: int
) -> None:
    rewards, ids = data
    permutation = np.random.default_rng(seed).permutation(len(rewards))
    base = rllm.compute_advantages(name, rewards, ids, **options)
    moved = rllm.compute_advantages(name, [rewards[p] for p in permutation], [ids[p] for p in permutation], **options)
    assert moved == pytest.approx(base[permutation], rel=1e-9, abs=1e-9)


@given(data=batches(min_group=2), seed=st.integers(0, 2**32 - 1))
def test_estimators_with_inputs_are_equivariant(data: tuple[list[float], list[Any]], seed: int) -> None:
    rewards, ids = data
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 50, len(rewards)).astype(float)
    components = rng.random((len(rewards), 2))
    permutation = rng.permutation(len(rewards))
    for name, fields in [
        ("opo", {"response_lengths": lengths}),
        ("remax", {"baseline_rewards": lengths / 50}),
        ("gdpo", {"reward_components": components}),
        ("grpo_passk", {}),
    ]:
        base = rllm.compute_advantages(name, rewards, ids, **fields)
        moved_fields = {k: v[permutation] for k, v in fields.items()}
        moved = rllm.compute_advantages(
            name, [rewards[p] for p in permutation], [ids[p] for p in permutation], **moved_fields
        )
        assert moved == pytest.approx(base[permutation], rel=1e-9, abs=1e-9), name


@given(data=batches())
def test_kernels_match_the_per_group_reference(data: tuple[list[float], list[Any]]) -> None:
    rewards, ids = data

    def ours(name: str, **options: Any) -> np.ndarray:
        return rllm.compute_advantages(name, rewards, ids, **options)

    tolerance = {"rel": 1e-9, "abs": 1e-9}
    assert ours("grpo") == pytest.approx(reference.grpo(rewards, ids), **tolerance)
    assert ours("grpo", preset="verl", dtype="float64") == pytest.approx(
        reference.grpo(rewards, ids, ddof=1), **tolerance
    )
    assert ours("dr_grpo") == pytest.approx(reference.dr_grpo(rewards, ids), **tolerance)
    assert ours("rloo") == pytest.approx(reference.rloo(rewards, ids), **tolerance)
    assert ours("reinforce") == pytest.approx(rewards, **tolerance)
    assert ours("gpg") == pytest.approx(reference.gpg(rewards, ids), **tolerance)
    assert ours("grpo_batch_std") == pytest.approx(reference.grpo_batch_std(rewards, ids), **tolerance)
    assert ours("reinforce_plus_plus_baseline") == pytest.approx(
        reference.reinforce_plus_plus_baseline(rewards, ids), **tolerance
    )


@given(data=batches(min_group=2), lengths_seed=st.integers(0, 1000))
def test_group_input_kernels_match_the_reference(data: tuple[list[float], list[Any]], lengths_seed: int) -> None:
    rewards, ids = data
    lengths = np.random.default_rng(lengths_seed).integers(1, 20, len(rewards)).astype(float)
    assert rllm.compute_advantages("opo", rewards, ids, response_lengths=lengths) == pytest.approx(
        reference.opo(rewards, ids, lengths.tolist()), rel=1e-9, abs=1e-9
    )
    assert rllm.compute_advantages("grpo_passk", rewards, ids) == pytest.approx(
        reference.grpo_passk(rewards, ids), rel=1e-9, abs=1e-9
    )
    positive = [abs(r) for r in rewards]
    assert rllm.compute_advantages("maxrl", positive, ids) == pytest.approx(
        reference.maxrl(positive, ids), rel=1e-9, abs=1e-9
    )


@given(
    rows=st.lists(st.lists(rewards_values, min_size=1, max_size=5), min_size=1, max_size=8),
    gamma=st.floats(0, 1),
)
def test_reinforce_plus_plus_is_whitened_discounted_return(rows: list[list[float]], gamma: float) -> None:
    returns = np.concatenate(reference.discounted(rows, gamma))
    expected = (returns - returns.mean()) / (reference.std(returns, 0) + 1e-6)
    got = rllm.compute_advantages(
        "reinforce_plus_plus", [sum(r) for r in rows], list(range(len(rows))), step_rewards=rows, gamma=gamma
    )
    assert got.offsets.tolist() == np.cumsum([0] + [len(r) for r in rows]).tolist()
    assert got.values == pytest.approx(expected, rel=1e-9, abs=1e-9)


@given(
    rows=st.lists(st.lists(st.floats(-1, 1), min_size=1, max_size=5), min_size=1, max_size=6),
    gamma=st.floats(0, 1),
    lam=st.floats(0, 1),
)
def test_gae_matches_the_recursion(rows: list[list[float]], gamma: float, lam: float) -> None:
    values = [[0.5 * x + 0.1 for x in row] for row in rows]
    expected = []
    for row, value in zip(rows, values, strict=True):
        next_values = [*value[1:], 0.0]
        deltas = [r + gamma * nv - v for r, nv, v in zip(row, next_values, value, strict=True)]
        expected += reference.discounted([deltas], gamma * lam)[0]
    got = rllm.compute_advantages(
        "gae",
        [0.0] * len(rows),
        list(range(len(rows))),
        step_rewards=rows,
        step_values=values,
        gamma=gamma,
        lam=lam,
        normalize=False,
    )
    assert got.values == pytest.approx(expected, rel=1e-9, abs=1e-9)
