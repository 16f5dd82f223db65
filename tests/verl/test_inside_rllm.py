"""verl's estimators reached from rllm by name (``verl.<name>``), and ``import rllm`` staying free of torch."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import rllm
from rllm.errors import MissingInputError
from rllm_verl.inside_rllm import VERL_ESTIMATORS

NOT_OFFERED = {"optimal_token_baseline", "tir_optimal_token_baseline", "gdpo"}
"""verl estimators that read inputs an rllm batch does not have (see rllm_verl.inside_rllm)."""

# ragged groups in shuffled order with string labels, and a group of one ("solo")
REWARDS = np.array([1.0, 0.0, 0.5, 2.0, 0.0, 1.0, 3.0, 0.25, 1.0, 0.0])
GROUPS = np.array(["a", "b", "a", "c", "b", "a", "solo", "c", "b", "c"], dtype=object)


def test_every_verl_estimator_an_rllm_batch_can_feed_is_offered() -> None:
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY

    verls_own = {name for name in ADV_ESTIMATOR_REGISTRY if not name.startswith("rllm.")}
    assert {spec.name for spec in VERL_ESTIMATORS} == verls_own - NOT_OFFERED
    offered = {name for name in rllm.get_plugin_manager().estimators.names() if name.startswith("verl.")}
    assert offered == {f"verl.{spec.name}" for spec in VERL_ESTIMATORS}


@pytest.mark.parametrize("name", ["grpo", "grpo_vectorized"])
def test_verls_grpo_equals_rllm_grpo_with_the_verl_preset(name: str) -> None:
    got = rllm.compute_advantages(f"verl.{name}", REWARDS, GROUPS)
    expected = rllm.compute_advantages("grpo", REWARDS, GROUPS, preset="verl")
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)
    # by hand, group "a" = 1, 0.5, 1: mean 0.8333, unbiased std 0.288675; (1 - 0.8333) / 0.288676 = 0.57735
    assert got[0] == pytest.approx(0.5773483, abs=1e-6)
    assert got[6] == pytest.approx(3.0 / (1 + 1e-6))  # verl: a lone response has mean 0, std 1


def test_verl_options_are_passed_and_checked() -> None:
    centred = rllm.compute_advantages("verl.grpo", REWARDS, GROUPS, norm_adv_by_std_in_grpo=False)
    np.testing.assert_allclose(centred[[0, 2, 5]], [1 / 6, -1 / 3, 1 / 6], atol=1e-6)
    with pytest.raises(rllm.RLLMError, match=r"'verl\.rloo'.*has no option 'clip'"):
        rllm.compute_advantages("verl.rloo", REWARDS, GROUPS, clip=1.0)


def test_verls_rloo_equals_rllms() -> None:
    expected = rllm.compute_advantages("rloo", REWARDS, GROUPS)
    np.testing.assert_allclose(rllm.compute_advantages("verl.rloo", REWARDS, GROUPS), expected, atol=1e-6)
    vectorized = rllm.compute_advantages("verl.rloo_vectorized", REWARDS, GROUPS)
    np.testing.assert_allclose(np.delete(vectorized, 6), np.delete(expected, 6), atol=1e-6)
    # verl's two RLOOs differ on a group of one: the loop keeps the raw reward, the vectorized one gives 0
    assert (expected[6], vectorized[6]) == (3.0, 0.0)


@pytest.mark.parametrize(
    ("name", "fields"),
    [
        ("gpg", {}),
        ("grpo_passk", {}),
        ("reinforce_plus_plus_baseline", {"response_lengths": np.array([3, 1, 2, 5, 4, 1, 2, 6, 1])}),
        ("remax", {"baseline_rewards": np.linspace(0.0, 1.0, len(REWARDS) - 1)}),
    ],
)
def test_verls_estimator_equals_rllms_under_the_verl_preset(name: str, fields: dict[str, np.ndarray]) -> None:
    rewards, groups = np.delete(REWARDS, 6), np.delete(GROUPS, 6)  # verl's pass@k refuses a group of one
    got = rllm.compute_advantages(f"verl.{name}", rewards, groups, **fields)
    expected = rllm.compute_advantages(name, rewards, groups, preset="verl", **fields)
    np.testing.assert_allclose(got, expected, atol=1e-5)
    assert np.ptp(expected) > 0.5


def test_verls_opo_needs_and_uses_response_lengths() -> None:
    with pytest.raises(MissingInputError, match=r"'verl\.opo' needs the input 'response_lengths'"):
        rllm.compute_advantages("verl.opo", REWARDS, GROUPS)
    lengths = np.array([3, 1, 2, 5, 4, 1, 2, 2, 6, 1])
    got = rllm.compute_advantages("verl.opo", REWARDS, GROUPS, response_lengths=lengths)
    np.testing.assert_allclose(
        got, rllm.compute_advantages("opo", REWARDS, GROUPS, response_lengths=lengths), atol=1e-6
    )


def test_verls_per_token_estimator_returns_one_advantage_per_step() -> None:
    # REINFORCE++, gamma 1: returns-to-go [1, 1] and [2, 2, 2], whitened by verl over the 5 tokens
    # with the unbiased variance 0.3: (1 - 1.6) / sqrt(0.3) = -1.0954451, (2 - 1.6) / sqrt(0.3) = 0.7302967
    got = rllm.compute_advantages("verl.reinforce_plus_plus", [1.0, 2.0], [0, 0], step_rewards=[[0, 1], [0, 0, 2]])
    assert isinstance(got, rllm.Ragged) and got.lengths.tolist() == [2, 3]
    np.testing.assert_allclose(got.values, [-1.0954451, -1.0954451, 0.7302967, 0.7302967, 0.7302967], atol=1e-5)


def test_verls_gae_gets_step_values() -> None:
    # gamma = lam = 1: A_t = return-to-go - V_t. Rewards [0, 1], values [0, 0.5] give [1, 0.5];
    # rewards [0, 0, 2], values [1, 0, 1] give [1, 2, 1]. verl whitens over the 5 tokens: mean 1.1,
    # unbiased variance 1.2 / 4 = 0.3, so (x - 1.1) / 0.5477226
    got = rllm.compute_advantages(
        "verl.gae", [1.0, 2.0], [0, 0], step_rewards=[[0, 1], [0, 0, 2]], step_values=[[0, 0.5], [1, 0, 1]]
    )
    np.testing.assert_allclose(got.values, [-0.1825742, -1.0954451, -0.1825742, 1.6431677, -0.1825742], atol=1e-5)


def test_import_rllm_imports_neither_torch_nor_verl_even_when_listing() -> None:
    code = (
        "import sys, json, rllm\n"
        "names = rllm.get_plugin_manager().estimators.names()\n"
        "entry = rllm.get_estimator('verl.grpo')\n"
        "print(json.dumps({'verl_names': [n for n in names if n.startswith('verl.')], 'doc': entry.doc,\n"
        "  'loaded': sorted(m for m in ('torch', 'verl', 'ray') if m in sys.modules)}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    report = json.loads(done.stdout)
    assert report["loaded"] == []
    assert "verl.grpo_vectorized" in report["verl_names"] and report["doc"].startswith("verl's GRPO")
