"""rllm's estimators run by verl's own dispatch: ``compute_advantage`` on a ``DataProto``, by name ``rllm.<name>``."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import rllm
from rllm.errors import EstimatorOptionError, MissingInputError

OPTIONS: dict[str, dict[str, Any]] = {"mix": {"components": "0.7*grpo + 0.3*rloo"}, "ema_baseline": {"key": "role"}}
"""Options an estimator cannot run without (or, for ema_baseline, the one that suits verl's per-step uids)."""
OUTCOME_ONLY = sorted(
    name
    for name in rllm.get_plugin_manager().estimators.names()
    if not name.startswith("verl.") and set(rllm.get_estimator(name).requires) <= {"response_lengths"}
)


def verl_dispatch(inputs: dict[str, Any], estimator: str, **algorithm: Any) -> Any:
    """verl's ``compute_advantage`` on a DataProto built from ``inputs``; the DataProto it returns."""
    from omegaconf import OmegaConf
    from verl import DataProto
    from verl.trainer.ppo.ray_trainer import compute_advantage

    tensors = {"token_level_rewards": inputs["token_level_rewards"], "response_mask": inputs["response_mask"]}
    tensors.update(inputs.get("extra", {}))
    data = DataProto.from_dict(tensors=tensors, non_tensors={"uid": inputs["uids"]})
    config = OmegaConf.create({"adv_estimator": estimator, "norm_adv_by_std_in_grpo": True, "gamma": 1.0, **algorithm})
    return compute_advantage(
        data,
        adv_estimator=estimator,
        norm_adv_by_std_in_grpo=config.norm_adv_by_std_in_grpo,
        config=config,
    )


def on_tokens(per_response: np.ndarray, mask: np.ndarray) -> np.ndarray:
    return per_response[:, None] * mask


def test_the_estimators_under_test_cover_the_outcome_family() -> None:
    assert {"grpo", "rloo", "maxrl", "opo", "mix", "dr_grpo", "gpg"} <= set(OUTCOME_ONLY)
    assert "gae" not in OUTCOME_ONLY and "remax" not in OUTCOME_ONLY


@pytest.mark.parametrize("name", OUTCOME_ONLY)
def test_verl_dispatch_runs_every_outcome_estimator_like_rllm(name: str, padded_batch: Callable[..., Any]) -> None:
    import torch

    inputs = padded_batch(seed=len(name))
    options = OPTIONS.get(name, {})
    out = verl_dispatch(inputs, f"rllm.{name}", rllm_options=options)
    expected = rllm.compute_advantages(
        name, inputs["scores"], inputs["uids"], response_lengths=inputs["lengths"], **options
    )
    advantages = out.batch["advantages"]
    assert advantages.dtype == torch.float32 and advantages.shape == inputs["token_level_rewards"].shape
    np.testing.assert_allclose(advantages.numpy(), on_tokens(expected, inputs["mask"]), rtol=2e-6, atol=2e-6)
    assert torch.equal(out.batch["returns"], advantages)
    assert not advantages.numpy()[~inputs["mask"]].any()  # padding stays zero
    assert np.ptp(expected) > 0.1  # the comparison is not between two arrays of zeros


def test_options_and_verl_settings_reach_the_estimator() -> None:
    import torch

    # one group, rewards 1, 0, 0, 0 on the last of two tokens: rllm's default GRPO gives
    # 0.75 / (0.4330127 + 1e-6) = 1.7320468 and -0.5773489 (population std); preset verl gives
    # 1.5, -0.5 (unbiased std)
    rewards = torch.tensor([[0.0, 1.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]])
    inputs = {"token_level_rewards": rewards, "response_mask": torch.ones(4, 2), "uids": np.array(["a"] * 4, object)}
    default = verl_dispatch(inputs, "rllm.grpo").batch["advantages"][:, 0].tolist()
    assert default == pytest.approx([1.7320468, -0.5773489, -0.5773489, -0.5773489], abs=1e-6)
    verl_like = verl_dispatch(inputs, "rllm.grpo", rllm_options={"preset": "verl"}).batch["advantages"][:, 1]
    assert verl_like.tolist() == pytest.approx([1.5, -0.5, -0.5, -0.5], abs=1e-5)
    # verl's own switch (algorithm.norm_adv_by_std_in_grpo=False) reaches rllm's GRPO: r - mean
    centred = verl_dispatch(inputs, "rllm.grpo", norm_adv_by_std_in_grpo=False).batch["advantages"][:, 0]
    assert centred.tolist() == pytest.approx([0.75, -0.25, -0.25, -0.25])


def test_an_unknown_option_is_an_error_naming_it(padded_batch: Callable[..., Any]) -> None:
    with pytest.raises(EstimatorOptionError, match=r"'rloo'.*has no option 'prest'"):
        verl_dispatch(padded_batch(), "rllm.rloo", rllm_options={"prest": "verl"})


def test_options_must_be_a_mapping(padded_batch: Callable[..., Any]) -> None:
    with pytest.raises(rllm.ConfigError, match=r"algorithm\.rllm_options must be a mapping"):
        verl_dispatch(padded_batch(), "rllm.rloo", rllm_options="verl")


def test_a_field_verl_does_not_pass_is_an_error_naming_it(padded_batch: Callable[..., Any]) -> None:
    # verl's trainer hands the critic's values to its own gae alone: the error says to use that, in one line
    with pytest.raises(
        MissingInputError, match=r"'gae' needs 'step_values'.*only to its own algorithm.adv_estimator=gae"
    ):
        verl_dispatch(padded_batch(), "rllm.gae")
    with pytest.raises(
        MissingInputError, match=r"'remax' needs 'baseline_rewards'.*its own algorithm.adv_estimator=remax"
    ):
        verl_dispatch(padded_batch(), "rllm.remax")
    with pytest.raises(MissingInputError) as info:
        verl_dispatch(padded_batch(), "rllm.gae")
    assert "\n" not in str(info.value) and "step_values from" not in str(info.value)


def test_remax_reads_verls_reward_baselines(padded_batch: Callable[..., Any]) -> None:
    import torch

    inputs = padded_batch(seed=3)
    baselines = np.linspace(0.0, 1.0, len(inputs["uids"]))
    inputs["extra"] = {"reward_baselines": torch.tensor(baselines, dtype=torch.float32)}
    got = verl_dispatch(inputs, "rllm.remax").batch["advantages"].numpy()
    expected = rllm.compute_advantages("remax", inputs["scores"], inputs["uids"], baseline_rewards=baselines)
    np.testing.assert_allclose(got, on_tokens(expected, inputs["mask"]), rtol=2e-6, atol=2e-6)


def test_per_step_estimator_gets_tokens_as_steps_and_returns_token_advantages() -> None:
    import torch

    # reinforce_plus_plus, gamma 1: returns-to-go of [0, 1] and [0, 0, 2] are [1, 1] and [2, 2, 2];
    # whitened over the 5 steps (mean 1.6, population std 0.4898979 + eps 1e-6): -0.6 / 0.489899
    # = -1.2247424 twice, 0.4 / 0.489899 = 0.8164949 three times
    rewards = torch.tensor([[0.0, 1.0, 7.0], [0.0, 0.0, 2.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    inputs = {"token_level_rewards": rewards, "response_mask": mask, "uids": np.array(["a", "a"], object)}
    out = verl_dispatch(inputs, "rllm.reinforce_plus_plus").batch["advantages"]
    assert out.dtype == torch.float64  # verl's dtype is kept
    expected = [[-1.2247424, -1.2247424, 0.0], [0.8164949] * 3]
    np.testing.assert_allclose(out.numpy(), expected, atol=1e-6)


@pytest.mark.parametrize("preset", [None, "verl"])
def test_gae_takes_verls_values_on_a_multi_turn_mask_as_verls_gae_is_called(preset: str | None) -> None:
    """verl's gae call (values, gamma, lam; no labels) with observation spans inside the responses."""
    import torch
    from verl.trainer.ppo.core_algos import compute_gae_advantage_return, get_adv_estimator_fn

    mask = torch.tensor(
        [[1, 1, 0, 0, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1, 1, 1], [1, 0, 0, 1, 1, 0, 0, 0]], dtype=torch.float32
    )
    rng = np.random.default_rng(7)
    rewards = torch.tensor(rng.normal(0.0, 1.0, mask.shape), dtype=torch.float32) * mask
    values = torch.tensor(rng.normal(0.0, 1.0, mask.shape), dtype=torch.float32) * mask
    theirs, their_returns = compute_gae_advantage_return(rewards, values, mask, gamma=0.99, lam=0.9)
    config = None if preset is None else {"rllm_options": {"preset": preset}}
    ours, our_returns = get_adv_estimator_fn("rllm.gae")(
        token_level_rewards=rewards, values=values, response_mask=mask, gamma=0.99, lam=0.9, config=config
    )
    on = mask.bool()
    np.testing.assert_allclose(our_returns[on].numpy(), their_returns[on].numpy(), atol=1e-5)
    # verl whitens with the unbiased variance, rllm's default (no preset) with the population one: over the
    # n = 16 masked tokens the centred values are the same and divided by sqrt((n - 1) / n) times verl's std
    n = int(on.sum())
    scale = 1.0 if preset == "verl" else (n / (n - 1)) ** 0.5
    np.testing.assert_allclose(ours[on].numpy(), theirs[on].numpy() * scale, atol=1e-5)
    assert not ours[~on].any()


def test_group_labels_are_required() -> None:
    import torch
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    with pytest.raises(MissingInputError, match="non_tensor_batch\\['uid'\\]"):
        get_adv_estimator_fn("rllm.grpo")(token_level_rewards=torch.ones(2, 1), response_mask=torch.ones(2, 1))


def test_every_rllm_estimator_is_in_verls_registry_and_verls_own_are_not_sent_back() -> None:
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY

    from rllm_verl import register_in_verl

    mine = {name for name in rllm.get_plugin_manager().estimators.names() if not name.startswith("verl.")}
    assert {f"rllm.{name}" for name in mine} <= set(ADV_ESTIMATOR_REGISTRY)
    assert not any(name.startswith("rllm.verl.") for name in ADV_ESTIMATOR_REGISTRY)
    assert sorted(register_in_verl()) == sorted(f"rllm.{name}" for name in mine)  # a second call is harmless


def _adapter(name: str) -> Callable[..., Any]:
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    return get_adv_estimator_fn(f"rllm.{name}")


def test_a_reward_outside_the_mask_counts_as_verl_counts_it_and_padding_nan_does_not() -> None:
    import torch

    # rows score 3 + 1 (the 1 sits on a mask-0 token: verl sums the whole row) and 0 (its NaN is padding):
    # rllm's RLOO then gives 4 - 0 = 4 and 0 - 4 = -4
    rewards = torch.tensor([[3.0, 1.0, 0.0], [0.0, 0.0, float("nan")]])
    mask = torch.tensor([[1.0, 0.0, 1.0], [1.0, 1.0, 0.0]])
    advantages, _ = _adapter("rloo")(rewards, mask, index=np.array(["a", "a"], object))
    assert advantages.tolist() == [[4.0, 0.0, 4.0], [-4.0, -4.0, 0.0]]


def test_reinforce_plus_plus_and_remax_return_the_reward_to_go_skipping_observation_spans() -> None:
    import torch

    # gamma 0.5, mask 1 1 0 0 1 with reward 2 on the last token: returns 0.5, 1, 0, 0, 2
    rewards = torch.tensor([[0.0, 0.0, 0.0, 0.0, 2.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0, 0.0, 1.0]])
    _, returns = _adapter("reinforce_plus_plus")(
        rewards, mask, index=np.array(["a"], object), config=SimpleNamespace(gamma=0.5)
    )
    assert returns.tolist() == [[0.5, 1.0, 0.0, 0.0, 2.0]]
    # remax is undiscounted: rewards 1, 2 on a mask 1 1 -> returns 3, 2; advantages 3 - baseline 1 = 2
    advantages, returns = _adapter("remax")(
        torch.tensor([[1.0, 2.0]]),
        torch.ones(1, 2),
        index=np.array(["a"], object),
        reward_baselines=torch.tensor([1.0]),
    )
    assert returns.tolist() == [[3.0, 2.0]] and advantages.tolist() == [[2.0, 2.0]]


def test_a_fractional_mask_counts_its_tokens_for_per_step_estimators() -> None:
    import torch

    # a mask weight of 0.5 is still a token: reinforce_plus_plus, gamma 1, over steps [0, 1] and [2]:
    # returns 1, 1, 2; whitened (mean 4/3, population std 0.4714045 + 1e-6): -0.7071053 twice, 1.4142106
    rewards = torch.tensor([[0.0, 1.0], [2.0, 0.0]])
    mask = torch.tensor([[0.5, 1.0], [1.0, 0.0]])
    advantages, _ = _adapter("reinforce_plus_plus")(rewards, mask, index=np.array(["a", "a"], object))
    np.testing.assert_allclose(advantages.numpy(), [[-0.7071053, -0.7071053], [1.4142106, 0.0]], atol=1e-5)


def test_an_interpolation_bomb_in_rllm_options_is_refused_naming_the_key(padded_batch: Callable[..., Any]) -> None:
    bomb = {"s0": "x", **{f"s{k}": f"${{.s{k - 1}}}${{.s{k - 1}}}" for k in range(1, 40)}}
    with pytest.raises(rllm.ConfigError, match=r"rllm_options\.s\d+: its interpolations would resolve to more than"):
        verl_dispatch(padded_batch(), "rllm.rloo", rllm_options=bomb)


def test_a_stateful_estimator_keeps_its_state_across_verls_steps() -> None:
    """``rllm.ema_baseline`` run by verl step after step learns its baseline, as in an rllm run."""
    import torch
    from omegaconf import OmegaConf

    from rllm_verl import ESTIMATOR_STATES

    ESTIMATOR_STATES.load_state_dict({})
    config = OmegaConf.create({"rllm_options": {"decay": 0.5, "key": "role"}})
    mask = torch.ones(2, 1)
    labels = np.array(["uid-1", "uid-1"], object)
    # step 1, rewards 1 and 0: the first sight of the role starts b at its mean 0.5 -> 0.5, -0.5
    first, _ = _adapter("ema_baseline")(torch.tensor([[1.0], [0.0]]), mask, index=labels, config=config)
    # step 2, rewards 1 and 1 against b = 0.5 -> 0.5, 0.5; b becomes 0.5 * 0.5 + 0.5 * 1 = 0.75
    fresh = np.array(["uid-2", "uid-2"], object)  # verl's trainer draws new uids every step
    second, _ = _adapter("ema_baseline")(torch.tensor([[1.0], [1.0]]), mask, index=fresh, config=config)
    assert first[:, 0].tolist() == [0.5, -0.5]
    assert second[:, 0].tolist() == [0.5, 0.5]
    saved = ESTIMATOR_STATES.state_dict()["ema_baseline"]["verl"]["baselines"]
    assert list(saved.values()) == [0.75]  # one baseline for the run, whatever the uids


def test_a_stateful_estimator_keyed_by_task_warns_once_that_verls_uids_change_every_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import torch
    from omegaconf import OmegaConf

    from rllm.errors import RLLMWarning
    from rllm_verl import inside_verl

    monkeypatch.setattr(inside_verl, "_warned_uid_keys", set())  # other tests here may have warned already

    config = OmegaConf.create({"rllm_options": {"decay": 0.5}})
    args = (torch.tensor([[1.0], [0.0]]), torch.ones(2, 1))
    with pytest.warns(RLLMWarning, match=r"rllm.ema_baseline keeps its state per task.*key=role") as caught:
        _adapter("ema_baseline")(*args, index=np.array(["u1", "u1"], object), config=config)
        _adapter("ema_baseline")(*args, index=np.array(["u2", "u2"], object), config=config)
    assert len([w for w in caught if issubclass(w.category, RLLMWarning)]) == 1
