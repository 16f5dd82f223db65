"""Whitening over tokens (``whiten_weight="tokens"``, the verl, SkyRL and OpenRLHF presets), by hand."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import rllm
from rllm import AlgorithmConfig, Step, Trajectory, TrajectoryGroup
from rllm.errors import EstimatorOptionError, InputFieldError, RLLMWarning
from rllm.estimators import statistics
from rllm.estimators.collect import collect_reward_and_advantage_from_trajectory_groups as collect
from rllm.estimators.numerics import PRESETS, resolve_numerics

# groups a = [1, 0] and b = [3, 1]: centred c = [0.5, -0.5, 1, -1]; with lengths [1, 3, 2, 2] the
# 8 tokens carry 0.5, -0.5 x 3, 1 x 2, -1 x 2: mean -1/8, deviations d = [0.625, -0.375, 1.125, -0.875],
# sum over tokens of d^2 = 0.390625 + 3 * 0.140625 + 2 * 1.265625 + 2 * 0.765625 = 4.875
REWARDS = [1.0, 0.0, 3.0, 1.0]
GROUPS = ["a", "a", "b", "b"]
LENGTHS = [1, 3, 2, 2]
DEVIATIONS = np.array([0.625, -0.375, 1.125, -0.875])


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(statistics, "_warned_fallbacks", set())


def test_verl_weights_the_mean_and_the_unbiased_variance_by_tokens() -> None:
    # verl: unbiased over tokens, 4.875 / 7 = 0.6964286; d / sqrt(0.6964286 + 1e-8)
    got = rllm.compute_advantages(
        "reinforce_plus_plus_baseline", REWARDS, GROUPS, preset="verl", response_lengths=LENGTHS
    )
    np.testing.assert_allclose(got, [0.7489309, -0.4493585, 1.3480755, -1.0485032], atol=1e-6)
    assert got.dtype == np.float32


def test_openrlhf_weights_by_tokens_with_the_population_variance() -> None:
    # OpenRLHF: population over tokens, 4.875 / 8 = 0.609375, clamped at 1e-8; d / 0.7806247
    got = rllm.compute_advantages(
        "reinforce_plus_plus_baseline", REWARDS, GROUPS, preset="openrlhf", response_lengths=LENGTHS
    )
    np.testing.assert_allclose(got, DEVIATIONS / np.sqrt(0.609375), atol=1e-6)
    np.testing.assert_allclose(got, [0.8006408, -0.4803845, 1.4411535, -1.1208971], atol=1e-6)


def test_prpo_weights_rewards_by_tokens_too() -> None:
    # rewards [1, 0] with 3 and 1 tokens: mean 0.75, unbiased variance (3 * 0.0625 + 0.5625) / 3 = 0.25
    got = rllm.compute_advantages("prpo", [1.0, 0.0], [0, 0], preset="verl", response_lengths=[3, 1])
    np.testing.assert_allclose(got, [0.5, -1.5], atol=1e-6)


def test_responses_weighting_and_the_rllm_preset_ignore_lengths() -> None:
    # per response: c = [0.5, -0.5, 1, -1], mean 0, unbiased variance 2.5 / 3
    expected = np.array([0.5, -0.5, 1.0, -1.0]) / np.sqrt(2.5 / 3 + 1e-8)
    for options in ({"preset": "verl", "whiten_weight": "responses"}, {"preset": "verl", "response_lengths": [1] * 4}):
        got = rllm.compute_advantages("reinforce_plus_plus_baseline", REWARDS, GROUPS, **options)
        np.testing.assert_allclose(got, expected, atol=1e-6)
    # rLLM's own preset: c / (population std + eps), lengths or not
    plain = rllm.compute_advantages("reinforce_plus_plus_baseline", REWARDS, GROUPS)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        weighted = rllm.compute_advantages("reinforce_plus_plus_baseline", REWARDS, GROUPS, response_lengths=LENGTHS)
    np.testing.assert_allclose(plain, weighted)
    np.testing.assert_allclose(plain, np.array([0.5, -0.5, 1.0, -1.0]) / (np.sqrt(0.625) + 1e-6))


def test_presets_name_their_weighting() -> None:
    assert {name: p.whiten_weight for name, p in PRESETS.items()} == {
        "rllm": "responses",
        "verl": "tokens",
        "skyrl": "tokens",
        "trl": "responses",
        "openrlhf": "tokens",
    }
    assert resolve_numerics("verl", whiten_weight="responses").preset == "verl"


def test_an_unknown_weighting_or_a_negative_length_is_an_error_naming_it() -> None:
    with pytest.raises(EstimatorOptionError, match="whiten_weight"):
        rllm.compute_advantages("gdpo", REWARDS, GROUPS, reward_components=[[1]] * 4, whiten_weight="words")
    with pytest.raises(InputFieldError, match=r"'response_lengths'.*position 1 in group 'a'.*-3"):
        rllm.compute_advantages(
            "reinforce_plus_plus_baseline", REWARDS, GROUPS, preset="verl", response_lengths=[1, -3, 2, 2]
        )


def test_without_lengths_the_preset_warns_once_per_estimator() -> None:
    with pytest.warns(RLLMWarning, match=r"'prpo' under preset 'openrlhf' whitens over tokens"):
        rllm.compute_advantages("prpo", REWARDS, GROUPS, preset="openrlhf")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rllm.compute_advantages("prpo", REWARDS, GROUPS, preset="openrlhf")
    with pytest.warns(RLLMWarning, match=r"'prpo' under whiten_weight='tokens'"):  # another source: warned again
        rllm.compute_advantages("prpo", REWARDS, GROUPS, whiten_weight="tokens")


def test_the_collection_step_weights_by_the_tokens_of_the_steps() -> None:
    # two trajectories with 3 and 1 response tokens over their steps, rewards 1 and 0: as prpo above
    trajectories = [
        Trajectory(name="solver", reward=1.0, steps=[Step(response_ids=[7, 7], reward=0.0), Step(response_ids=[7])]),
        Trajectory(name="solver", reward=0.0, steps=[Step(response_ids=[7], reward=0.0)]),
    ]
    group = TrajectoryGroup.for_task("t", "solver", trajectories)
    collect([group], AlgorithmConfig(estimator="prpo", estimator_options={"preset": "verl"}))
    advantages = [[step.advantage for step in t.steps] for t in group.trajectories]
    assert advantages == [[pytest.approx(0.5, abs=1e-6)] * 2, [pytest.approx(-1.5, abs=1e-6)]]
