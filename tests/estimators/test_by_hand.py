"""Small cases per estimator; every expected number is worked out by hand in the comment above it."""

from __future__ import annotations

import numpy as np
import pytest

import rllm
from rllm.errors import ConfigError, GroupError, MissingInputError


def adv(name: str, rewards: list[float], ids: list[object], **options: object) -> list[float]:
    return rllm.compute_advantages(name, rewards, ids, **options).tolist()


def test_dr_grpo_subtracts_the_group_mean_only() -> None:
    # group a: mean 0.25 -> 0.75, -0.25, -0.25, -0.25; group b has one trajectory: baseline 0 -> 3
    assert adv("dr_grpo", [1, 0, 0, 0, 3], ["a"] * 4 + ["b"]) == pytest.approx([0.75, -0.25, -0.25, -0.25, 3.0])


def test_grpo_batch_std_divides_by_the_std_of_all_rewards() -> None:
    # centred: a = [0.5, -0.5], b = [0, 0]; all rewards [1, 0, 1, 1]: mean 0.75,
    # population variance (3 * 0.0625 + 0.5625) / 4 = 0.1875, std 0.4330127 -> 0.5 / 0.4330137 = 1.154698
    got = adv("grpo_batch_std", [1, 0, 1, 1], ["a", "a", "b", "b"])
    assert got == pytest.approx([1.154698, -1.154698, 0.0, 0.0], rel=1e-5)


def test_rloo_leaves_each_rollout_out_of_its_baseline() -> None:
    # 1 - mean(0, 0, 0) = 1; 0 - mean(1, 0, 0) = -1/3
    assert adv("rloo", [1, 0, 0, 0], [7] * 4) == pytest.approx([1.0, -1 / 3, -1 / 3, -1 / 3])


def test_reinforce_is_the_reward() -> None:
    assert adv("reinforce", [0.5, -2.0], [1, 2]) == [0.5, -2.0]


def test_reinforce_plus_plus_baseline_whitens_over_the_batch() -> None:
    # centred: a = [0.5, -0.5], b = [1, -1]; population variance (0.25 + 0.25 + 1 + 1) / 4 = 0.625,
    # std 0.7905694: 0.5 / 0.7905704 = 0.632455, 1 / 0.7905704 = 1.264911
    got = adv("reinforce_plus_plus_baseline", [1, 0, 3, 1], ["a", "a", "b", "b"])
    assert got == pytest.approx([0.632455, -0.632455, 1.264911, -1.264911], rel=1e-5)
    # verl whitening with one token per response: unbiased variance 2.5 / 3 = 0.833333,
    # sqrt(0.833333 + 1e-8) = 0.912871: 0.5 / 0.912871 = 0.547723, 1 / 0.912871 = 1.095445
    # (other lengths: tests/estimators/test_token_whitening.py)
    got = adv(
        "reinforce_plus_plus_baseline", [1, 0, 3, 1], ["a", "a", "b", "b"], preset="verl", response_lengths=[1] * 4
    )
    assert got == pytest.approx([0.547723, -0.547723, 1.095445, -1.095445], rel=1e-5)


def test_grpo_passk_credits_only_the_best() -> None:
    # best 0.9, runner-up 0.5: margin 0.4; mean 0.533333, deviations -0.333333, 0.366667, -0.033333,
    # squares sum 0.246667, population std sqrt(0.082222) = 0.286744: 0.4 / 0.286745 = 1.394967
    assert adv("grpo_passk", [0.2, 0.9, 0.5], [0, 0, 0]) == pytest.approx([0.0, 1.394967, 0.0], rel=1e-5)
    assert adv("grpo_passk", [0.2, 0.9, 0.5], [0, 0, 0], norm_adv_by_std_in_grpo=False) == pytest.approx(
        [0.0, 0.4, 0.0]
    )
    # a tie for the best: margin 0 for everyone
    assert adv("grpo_passk", [1, 1, 0], [0, 0, 0]) == [0.0, 0.0, 0.0]
    with pytest.raises(GroupError, match=r"grpo_passk.*'lonely'"):
        adv("grpo_passk", [1, 0, 1], [0, 0, "lonely"])


def test_opo_uses_a_length_weighted_baseline() -> None:
    # baseline (1 * 1 + 3 * 0) / (1 + 3) = 0.25 -> 0.75, -0.25
    assert adv("opo", [1, 0], [0, 0], response_lengths=[1, 3]) == pytest.approx([0.75, -0.25])


def test_remax_subtracts_the_greedy_rollout_reward() -> None:
    assert adv("remax", [1, 0.5], [0, 1], baseline_rewards=[0.5, 0.5]) == pytest.approx([0.5, 0.0])


def test_gpg_rescales_by_the_share_of_rewarded_rollouts() -> None:
    # 4 rollouts, 1 non-zero reward: alpha = 4; centred a = [0.5, -0.5], b = [0, 0]
    assert adv("gpg", [1, 0, 0, 0], ["a", "a", "b", "b"]) == pytest.approx([2.0, -2.0, 0.0, 0.0])


def test_maxrl_divides_by_the_group_mean() -> None:
    # mean 0.25: 0.75 / 0.250001 = 2.999988, -0.25 / 0.250001 = -0.999996; a group of zeros gets 0
    got = adv("maxrl", [1, 0, 0, 0, 0, 0], [0, 0, 0, 0, 1, 1])
    assert got == pytest.approx([2.999988, -0.999996, -0.999996, -0.999996, 0.0, 0.0], rel=1e-6)


def test_gdpo_normalises_each_component_then_weights_then_whitens() -> None:
    # component 1 [1, 0] -> GRPO [1, -1] (times 0.5 / 0.500001); component 2 [0, 1] -> [-1, 1];
    # weights (1, 2): sum [-1, 1]; whitened (mean 0, population std 1) stays about [-1, 1]
    components = [[1.0, 0.0], [0.0, 1.0]]
    got = adv("gdpo", [0, 0], [0, 0], reward_components=components, component_weights=[1, 2])
    assert got == pytest.approx([-1.0, 1.0], rel=1e-5)
    # equal weights cancel exactly
    assert adv("gdpo", [0, 0], [0, 0], reward_components=components) == pytest.approx([0.0, 0.0], abs=1e-9)
    with pytest.raises(GroupError, match="3 component weights for 2"):
        adv("gdpo", [0, 0], [0, 0], reward_components=components, component_weights=[1, 2, 3])


def test_reinforce_plus_plus_discounts_step_rewards_then_whitens() -> None:
    # gamma 0.5: row [0, 1] -> returns [0 + 0.5 * 1, 1] = [0.5, 1]; row [1] -> [1]
    # all returns [0.5, 1, 1]: mean 0.833333, population std 0.235702:
    # (0.5 - 0.833333) / 0.235703 = -1.414208, (1 - 0.833333) / 0.235703 = 0.707104
    got = rllm.compute_advantages("reinforce_plus_plus", [1, 1], [0, 0], step_rewards=[[0, 1], [1]], gamma=0.5)
    assert got.offsets.tolist() == [0, 2, 3]
    assert got.values.tolist() == pytest.approx([-1.414208, 0.707104, 0.707104], rel=1e-5)


def test_gae_runs_the_delta_lambda_recursion() -> None:
    # gamma 1, lam 0.5, values [0.5, 0.2], rewards [1, 0]:
    # delta_1 = 0 + 0 - 0.2 = -0.2; delta_0 = 1 + 0.2 - 0.5 = 0.7; A_1 = -0.2; A_0 = 0.7 + 0.5 * -0.2 = 0.6
    got = rllm.compute_advantages(
        "gae", [1], [0], step_rewards=[[1, 0]], step_values=[[0.5, 0.2]], gamma=1.0, lam=0.5, normalize=False
    )
    assert got.values.tolist() == pytest.approx([0.6, -0.2])


def test_mix_is_a_weighted_sum_of_registered_estimators() -> None:
    # grpo [1.732047, -0.577349 x3], rloo [1, -1/3 x3]:
    # 0.7 * 1.732047 + 0.3 * 1 = 1.512433; 0.7 * -0.577349 + 0.3 * -1/3 = -0.504144
    got = adv("mix", [1, 0, 0, 0], [0] * 4, components="0.7*grpo + 0.3*rloo")
    assert got == pytest.approx([1.512433, -0.504144, -0.504144, -0.504144], rel=1e-5)
    # a mapping with options for one component: grpo under the verl preset alone gives 1.5, -0.5
    got = adv("mix", [1, 0, 0, 0], [0] * 4, components={"grpo": {"weight": 1.0, "preset": "verl"}})
    assert got == pytest.approx([1.5, -0.5, -0.5, -0.5], rel=1e-5)
    # minus signs and implicit weights: rloo - 0.5 * reinforce = [1 - 0.5, -1/3 - 0]
    got = adv("mix", [1, 0, 0, 0], [0] * 4, components="rloo - 0.5*reinforce")
    assert got == pytest.approx([0.5, -1 / 3, -1 / 3, -1 / 3])


def test_mix_refuses_unreadable_components_and_unknown_names() -> None:
    with pytest.raises(ConfigError, match=r"0\.7 grpo"):
        adv("mix", [1, 0], [0, 0], components="0.7 grpo")
    with pytest.raises(ConfigError, match="needs its components"):
        adv("mix", [1, 0], [0, 0])
    with pytest.raises(rllm.errors.EstimatorNotFoundError, match="grpp"):
        adv("mix", [1, 0], [0, 0], components="grpp")


def test_missing_inputs_name_the_field_and_the_estimator() -> None:
    for name, field in [
        ("opo", "response_lengths"),
        ("remax", "baseline_rewards"),
        ("gdpo", "reward_components"),
        ("reinforce_plus_plus", "step_rewards"),
        ("gae", "step_values"),
    ]:
        extra = {"step_rewards": [[1.0]]} if name == "gae" else {}
        with pytest.raises(MissingInputError, match=rf"'{name}'.*'{field}'"):
            rllm.compute_advantages(name, [1.0], [0], **extra)
    # inside a composition the component that needs the field is named
    with pytest.raises(MissingInputError, match=r"'opo'.*'response_lengths'"):
        adv("mix", [1.0], [0], components="grpo + opo")


def test_unknown_numerics_values_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="single"):
        adv("grpo", [1, 0], [0, 0], single="nan")
    with pytest.raises(ConfigError, match="Unknown numerics preset 'verI'"):
        adv("grpo", [1, 0], [0, 0], preset="verI")


@pytest.mark.parametrize("shuffle", [False, True])
def test_large_ragged_batches_agree_with_a_direct_computation(shuffle: bool) -> None:
    # more values than one block of the blockwise kernels, groups of 1..16 with float labels
    rng = np.random.default_rng(3)
    sizes = rng.integers(1, 17, 9000)
    ids = np.repeat(np.arange(len(sizes)) * 2.5 - 7, sizes)
    if shuffle:
        rng.shuffle(ids)
    rewards = rng.random(len(ids))
    got = rllm.compute_advantages("grpo", rewards, ids)
    for label in np.unique(ids)[::97]:
        members = ids == label
        r = rewards[members]
        expected = r / (1 + 1e-6) if len(r) == 1 else (r - r.mean()) / (r.std() + 1e-6)
        assert got[members] == pytest.approx(expected, rel=1e-9)


def test_dense_integer_labels_in_any_order() -> None:
    # groups 0: [1, 0] -> rloo [1, -1]; 1: [3, 1, 2] -> 3 - 1.5 = 1.5, 1 - 2.5 = -1.5, 2 - 2 = 0; 2: [5] -> 5
    ids = np.array([1, 0, 2, 1, 0, 1])
    assert adv("rloo", [3, 1, 5, 1, 0, 2], ids) == pytest.approx([1.5, 1.0, 5.0, -1.5, -1.0, 0.0])
    assert ids.tolist() == [1, 0, 2, 1, 0, 1]  # the caller's labels are left alone
