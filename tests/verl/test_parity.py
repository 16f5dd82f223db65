"""``preset="verl"`` against verl's own estimator functions (``verl.trainer.ppo.core_algos``), on the same inputs.

Every batch is seeded and verl-shaped: ragged groups (one of a single response) in shuffled
order with string uids, right-padded responses of different lengths, rewards spread over each
response's tokens (verl sums them; zero on the padding, as verl's batches have), exact zeros
for GPG's count. rllm gets the summed rewards and the lengths; its advantages, copied over each
response's tokens (or one per token for the per-token estimators), must equal verl's on every
token within 1e-5.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

import rllm
from rllm.errors import RLLMWarning

TOLERANCE = 1e-5


@dataclass
class Batch:
    """One batch as verl sees it (tensors) and as rllm sees it (flat arrays)."""

    uids: np.ndarray
    lengths: np.ndarray
    mask: np.ndarray
    token_rewards: np.ndarray
    components: np.ndarray

    @property
    def scores(self) -> np.ndarray:
        """Each response's reward, summed over its tokens as verl sums them (the same float32 rounding)."""
        return self.tensor(self.token_rewards).sum(dim=-1).numpy()

    def tensor(self, values: np.ndarray) -> Any:
        import torch

        return torch.tensor(values, dtype=torch.float32)


def make_batch(seed: int, *, min_group: int = 1, on_last_token: bool = False) -> Batch:
    """Ragged groups (sizes ``min_group``..6, a group of one when ``min_group`` is 1), shuffled, padded."""
    rng = np.random.default_rng(seed)
    sizes = np.append(rng.integers(max(min_group, 2), 7, size=7), min_group)
    uids = np.array([f"prompt-{g}" for g, k in enumerate(sizes) for _ in range(k)], dtype=object)
    uids = uids[rng.permutation(len(uids))]
    n = len(uids)
    lengths = rng.integers(1, 13, size=n)
    width = int(lengths.max()) + 3  # padding on every row
    mask = (np.arange(width)[None, :] < lengths[:, None]).astype(np.float32)
    if on_last_token:  # verl's reward managers put an outcome reward on the last response token
        token_rewards = np.zeros((n, width))
        token_rewards[np.arange(n), lengths - 1] = rng.normal(1.0, 1.5, size=n)
    else:
        token_rewards = rng.normal(0.0, 0.5, size=(n, width)) * mask
    token_rewards[rng.random(n) < 0.25] = 0.0  # exact zeros: GPG counts the non-zero rewards
    components = np.stack([rng.integers(0, 2, n), rng.normal(0, 3, n), rng.random(n)], axis=1)
    return Batch(uids, lengths, mask, token_rewards.astype(np.float32), components)


def verl_fn(name: str) -> Callable[..., Any]:
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    return get_adv_estimator_fn(name)


def verl_outcome(name: str, batch: Batch, **kwargs: Any) -> np.ndarray:
    """verl's ``name`` on the batch: its (responses, tokens) advantages."""
    from omegaconf import OmegaConf

    config = OmegaConf.create({"norm_adv_by_std_in_grpo": kwargs.get("norm_adv_by_std_in_grpo", True)})
    advantages, _ = verl_fn(name)(
        token_level_rewards=batch.tensor(batch.token_rewards),
        response_mask=batch.tensor(batch.mask),
        index=batch.uids,
        config=config,
        **kwargs,
    )
    return advantages.numpy()


def on_tokens(per_response: np.ndarray, batch: Batch) -> np.ndarray:
    return np.asarray(per_response, dtype=np.float64)[:, None] * batch.mask


def gap(ours: np.ndarray, theirs: np.ndarray) -> float:
    """Largest absolute difference over every token (padding included: both must leave it 0)."""
    assert ours.shape == theirs.shape
    return float(np.max(np.abs(ours - theirs)))


# (rllm name, rllm options, verl name, verl keyword arguments)
OUTCOME = [
    ("grpo", {}, "grpo", {}),
    ("grpo", {"norm_adv_by_std_in_grpo": False}, "grpo", {"norm_adv_by_std_in_grpo": False}),
    ("dr_grpo", {}, "grpo", {"norm_adv_by_std_in_grpo": False}),
    ("grpo_vectorized", {}, "grpo_vectorized", {}),
    ("grpo_vectorized", {"norm_adv_by_std_in_grpo": False}, "grpo_vectorized", {"norm_adv_by_std_in_grpo": False}),
    ("rloo", {}, "rloo", {}),
    ("rloo_vectorized", {}, "rloo_vectorized", {}),
    ("opo", {}, "opo", {}),
    ("gpg", {}, "gpg", {}),
    ("gpg", {"f_norm": 2.5}, "gpg", {"f_norm": 2.5}),
    ("reinforce_plus_plus_baseline", {}, "reinforce_plus_plus_baseline", {}),
]


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(("name", "options", "peer", "peer_options"), OUTCOME, ids=lambda v: str(v or ""))
def test_outcome_estimators_equal_verls_on_every_token(
    name: str, options: dict[str, Any], peer: str, peer_options: dict[str, Any], seed: int
) -> None:
    batch = make_batch(seed)
    theirs = verl_outcome(peer, batch, **peer_options)
    ours = rllm.compute_advantages(
        name, batch.scores, batch.uids, preset="verl", response_lengths=batch.lengths, **options
    )
    assert gap(on_tokens(ours, batch), theirs) <= TOLERANCE
    assert np.ptp(ours) > 0.5  # not a comparison of zeros
    # per response: the value on a response's first token is its advantage
    np.testing.assert_allclose(ours, theirs[:, 0], atol=TOLERANCE, rtol=0)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("by_std", [True, False])
def test_grpo_passk_equals_verls(seed: int, by_std: bool) -> None:
    batch = make_batch(seed, min_group=2)  # verl refuses groups of one: there is no runner-up
    theirs = verl_outcome("grpo_passk", batch, norm_adv_by_std_in_grpo=by_std)
    ours = rllm.compute_advantages(
        "grpo_passk", batch.scores, batch.uids, preset="verl", norm_adv_by_std_in_grpo=by_std
    )
    assert gap(on_tokens(ours, batch), theirs) <= TOLERANCE
    assert np.count_nonzero(ours) >= len(set(batch.uids)) - 1  # the best of (nearly) every group is credited


@pytest.mark.parametrize("seed", [0, 1])
def test_remax_equals_verls_with_the_reward_on_the_last_token(seed: int) -> None:
    """verl's ReMax gives each token its reward-to-go minus the baseline; with the outcome reward on the
    last token (where verl's reward managers put it), that is ``r_i - b_i`` on every token."""
    import torch

    batch = make_batch(seed, on_last_token=True)
    baselines = np.random.default_rng(seed).normal(0.5, 1.0, len(batch.uids)).astype(np.float32)
    theirs, _ = verl_fn("remax")(
        token_level_rewards=batch.tensor(batch.token_rewards),
        response_mask=batch.tensor(batch.mask),
        reward_baselines=torch.tensor(baselines),
    )
    ours = rllm.compute_advantages("remax", batch.scores, batch.uids, preset="verl", baseline_rewards=baselines)
    assert gap(on_tokens(ours, batch), theirs.numpy()) <= TOLERANCE


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("by_std", [True, False])
def test_gdpo_equals_verls_with_reward_components_and_weights(seed: int, by_std: bool) -> None:
    """verl's GDPO reads each component from the batch (``algorithm.gdpo_reward_keys``) onto the last token."""
    import torch
    from omegaconf import OmegaConf

    batch = make_batch(seed)
    n = len(batch.uids)
    weights = [1.0, 0.5, 2.0]
    keys = ["accuracy", "format", "length"]
    prompt = 4  # verl finds the last response token from the attention mask after the prompt
    attention = np.concatenate([np.ones((n, prompt)), batch.mask], axis=1)
    theirs, _ = verl_fn("gdpo")(
        token_level_rewards=batch.tensor(batch.token_rewards),
        response_mask=batch.tensor(batch.mask),
        index=batch.uids,
        norm_adv_by_std_in_grpo=by_std,
        config=OmegaConf.create({"gdpo_reward_keys": keys, "gdpo_reward_weights": weights}),
        non_tensor_batch={key: batch.components[:, k] for k, key in enumerate(keys)},
        batch={
            "prompts": torch.zeros((n, prompt), dtype=torch.long),
            "attention_mask": torch.tensor(attention, dtype=torch.long),
        },
    )
    ours = rllm.compute_advantages(
        "gdpo",
        batch.scores,
        batch.uids,
        preset="verl",
        reward_components=batch.components,
        component_weights=weights,
        response_lengths=batch.lengths,
        norm_adv_by_std_in_grpo=by_std,
    )
    assert gap(on_tokens(ours, batch), theirs.numpy()) <= TOLERANCE
    assert np.ptp(ours) > 1.0


def token_rows(batch: Batch, values: np.ndarray) -> list[np.ndarray]:
    return [values[i, : batch.lengths[i]] for i in range(len(batch.uids))]


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("gamma", [1.0, 0.9])
def test_reinforce_plus_plus_equals_verls_per_token(seed: int, gamma: float) -> None:
    from omegaconf import OmegaConf

    batch = make_batch(seed)
    theirs, _ = verl_fn("reinforce_plus_plus")(
        token_level_rewards=batch.tensor(batch.token_rewards),
        response_mask=batch.tensor(batch.mask),
        config=OmegaConf.create({"gamma": gamma}),
    )
    ours = rllm.compute_advantages(
        "reinforce_plus_plus",
        batch.scores,
        batch.uids,
        preset="verl",
        gamma=gamma,
        step_rewards=token_rows(batch, batch.token_rewards),
    )
    assert isinstance(ours, rllm.Ragged)
    padded = np.zeros(batch.mask.shape)
    padded[batch.mask.astype(bool)] = ours.values
    assert gap(padded, theirs.numpy()) <= TOLERANCE


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize(("gamma", "lam"), [(1.0, 1.0), (0.99, 0.9)])
def test_gae_equals_verls_per_token(seed: int, gamma: float, lam: float) -> None:
    batch = make_batch(seed)
    values = (np.random.default_rng(seed + 100).normal(0.0, 1.0, batch.mask.shape) * batch.mask).astype(np.float32)
    theirs, _ = verl_fn("gae")(
        token_level_rewards=batch.tensor(batch.token_rewards),
        values=batch.tensor(values),
        response_mask=batch.tensor(batch.mask),
        gamma=gamma,
        lam=lam,
    )
    ours = rllm.compute_advantages(
        "gae",
        batch.scores,
        batch.uids,
        preset="verl",
        gamma=gamma,
        lam=lam,
        step_rewards=token_rows(batch, batch.token_rewards),
        step_values=token_rows(batch, values),
    )
    padded = np.zeros(batch.mask.shape)
    padded[batch.mask.astype(bool)] = ours.values
    # verl whitens the whole (responses, tokens) tensor but keeps the padding's values: compare the tokens
    tokens = batch.mask.astype(bool)
    assert gap(padded[tokens], theirs.numpy()[tokens]) <= TOLERANCE


def test_the_token_weighted_estimators_differ_from_response_level_whitening() -> None:
    """What token weighting changes: with padded responses of different lengths, whitening over responses
    is far from verl (the numbers before ``whiten_weight``); with one token each, the two agree."""
    batch = make_batch(3)
    theirs = verl_outcome("reinforce_plus_plus_baseline", batch)[:, 0]
    per_response = rllm.compute_advantages(
        "reinforce_plus_plus_baseline", batch.scores, batch.uids, preset="verl", whiten_weight="responses"
    )
    assert np.max(np.abs(per_response - theirs)) > 1e-2
    ones = np.ones(len(batch.uids))
    one_token = rllm.compute_advantages(
        "reinforce_plus_plus_baseline", batch.scores, batch.uids, preset="verl", response_lengths=ones
    )
    np.testing.assert_allclose(one_token, per_response, atol=1e-6)


def test_verl_running_rllms_estimator_gets_the_lengths_from_the_mask() -> None:
    """Inside verl (``algorithm.adv_estimator=rllm.reinforce_plus_plus_baseline``) the bridge passes the
    response lengths from the mask, so rllm's estimator with the verl preset equals verl's own."""
    from omegaconf import OmegaConf

    from rllm_verl import register_in_verl

    register_in_verl()
    batch = make_batch(4)
    theirs = verl_outcome("reinforce_plus_plus_baseline", batch)
    ours, _ = verl_fn("rllm.reinforce_plus_plus_baseline")(
        token_level_rewards=batch.tensor(batch.token_rewards),
        response_mask=batch.tensor(batch.mask),
        index=batch.uids,
        config=OmegaConf.create({"rllm_options": {"preset": "verl"}}),
    )
    assert gap(ours.numpy(), theirs) <= TOLERANCE


@pytest.mark.parametrize("estimator", ["reinforce_plus_plus_baseline", "gdpo"])
def test_a_token_whitening_preset_without_lengths_warns_once_and_whitens_responses(
    estimator: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rllm.estimators import statistics

    monkeypatch.setattr(statistics, "_warned_fallbacks", set())
    batch = make_batch(5)
    fields = {"reward_components": batch.components} if estimator == "gdpo" else {}
    with pytest.warns(RLLMWarning, match=rf"'{estimator}' under preset 'verl' whitens over tokens.*falls back") as seen:
        got = rllm.compute_advantages(estimator, batch.scores, batch.uids, preset="verl", **fields)
    assert len([w for w in seen if issubclass(w.category, RLLMWarning)]) == 1
    expected = rllm.compute_advantages(
        estimator, batch.scores, batch.uids, preset="verl", whiten_weight="responses", **fields
    )
    np.testing.assert_array_equal(got, expected)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once: a second call is silent
        rllm.compute_advantages(estimator, batch.scores, batch.uids, preset="verl", **fields)
