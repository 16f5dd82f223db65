"""rllm inside TRL: ``RLLMGRPOTrainer`` with rllm's ``grpo`` (TRL's preset) and ``trl.dapo`` is TRL's own step.

The reference is an unpatched ``trl.GRPOTrainer`` on the same tiny model, data, reward functions,
config and seed: its advantages and loss at each step, recorded from TRL's own methods. The
bad-input tests build trainers without training them.
"""

from __future__ import annotations

import sys

import pytest
from extras import skip_module_without

skip_module_without("torch", "trl", install="pip install 'rllm[trl]' (CI does)")

import numpy as np
import tiny_trl
import torch
from tiny_trl import REWARDS, recorded

import rllm
from rllm.errors import (
    ConfigError,
    EstimatorNotFoundError,
    EstimatorOptionError,
    LossNotFoundError,
    LossOptionError,
    MissingInputError,
    UnsupportedVersionError,
)
from rllm_trl import check_trl_version


def build(cls, tmp_path, rewards=REWARDS, config=None, **bridge):
    return cls(
        model=tiny_trl.model(),
        processing_class=tiny_trl.tokenizer(),
        reward_funcs=rewards,
        args=tiny_trl.config(tmp_path, **(config or {})),
        train_dataset=tiny_trl.dataset(),
        **bridge,
    )


def trl_group_advantages(rewards_per_func: torch.Tensor, generations: int) -> np.ndarray:
    """TRL's scale_rewards='group' written out in numpy (float64): the weighted sum (weights 1), completions
    no function scores left out, unbiased std over the rest of the group, (r - mean) / (std + 1e-4), 0 if unscored."""
    scores = rewards_per_func.double().numpy()
    unscored = np.isnan(scores).all(axis=1)
    rewards = np.where(unscored, np.nan, np.nansum(scores, axis=1))
    out = np.zeros(len(rewards))
    for start in range(0, len(rewards), generations):
        group = rewards[start : start + generations]
        kept = group[~np.isnan(group)]
        if len(kept) < 2:
            continue
        values = (group - kept.mean()) / (kept.std(ddof=1) + 1e-4)
        out[start : start + generations] = np.nan_to_num(values)
    return out


@pytest.mark.slow
def test_grpo_under_trls_preset_reproduces_trls_advantages_and_loss(tmp_path) -> None:
    from trl import GRPOTrainer

    from rllm_trl import RLLMGRPOTrainer

    config = {"gradient_accumulation_steps": 2, "steps_per_generation": 2, "per_device_train_batch_size": 4}
    theirs = recorded(build(GRPOTrainer, tmp_path / "trl", config=config))
    tiny_trl.train(theirs)
    ours = recorded(build(RLLMGRPOTrainer, tmp_path / "rllm", config=config, estimator="grpo", loss="trl.dapo"))
    tiny_trl.train(ours)

    assert len(ours.seen["advantages"]) == len(theirs.seen["advantages"]) == 2
    assert len(ours.seen["loss"]) == len(theirs.seen["loss"]) == 4  # two micro-batches per step
    unscored = 0
    for their_rewards, our_rewards in zip(theirs.seen["rewards"], ours.seen["rewards"], strict=True):
        assert torch.equal(their_rewards.nan_to_num(-7.0), our_rewards.nan_to_num(-7.0))  # the same completions
        unscored += int(torch.isnan(their_rewards).all(dim=1).sum())
    assert unscored > 0, "the data should hold a completion no reward function scores"
    steps = zip(theirs.seen["rewards"], theirs.seen["advantages"], ours.seen["advantages"], strict=True)
    for rewards, their, our in steps:
        assert (their - our).abs().max() <= 1e-6
        assert np.allclose(our.double().numpy(), trl_group_advantages(rewards, 4), rtol=0, atol=1e-5)
    assert max(float(our.abs().max()) for our in ours.seen["advantages"]) > 0.1
    for their, our in zip(theirs.seen["loss"], ours.seen["loss"], strict=True):
        assert abs(our - their) <= 1e-6
    assert any(abs(loss) > 1e-3 for loss in ours.seen["loss"])
    logged = [round(float(a), 6) for a in ours._logs["advantages"]]
    assert logged == [round(float(a), 6) for a in ours.seen["advantages"][-1]]


def test_a_trl_release_outside_the_tested_series_is_one_line_naming_it(monkeypatch) -> None:
    assert check_trl_version("1.16.0") == "1.16.0"
    assert check_trl_version("1.16.3rc1") == "1.16.3rc1"
    for version in ("1.15.2", "1.17.0", "2.0.0"):
        with pytest.raises(UnsupportedVersionError) as raised:
            check_trl_version(version)
        message = str(raised.value)
        assert f"TRL {version} is installed" in message and "1.16.x" in message and "\n" not in message

    import rllm_trl.version

    monkeypatch.setattr(rllm_trl.version.metadata, "version", lambda name: "1.15.2")
    monkeypatch.delitem(sys.modules, "rllm_trl.trainer", raising=False)
    with pytest.raises(UnsupportedVersionError, match=r"TRL 1\.15\.2 is installed"):
        from rllm_trl import RLLMGRPOTrainer  # noqa: F401


def test_unknown_names_and_options_get_rllms_close_match_errors(tmp_path) -> None:
    from rllm_trl import RLLMGRPOTrainer

    with pytest.raises(EstimatorNotFoundError, match=r"Did you mean 'rloo'"):
        build(RLLMGRPOTrainer, tmp_path, estimator="rlooo")
    with pytest.raises(LossNotFoundError, match=r"Did you mean 'trl\.dapo'"):
        build(RLLMGRPOTrainer, tmp_path, loss="trl.dapoo")
    with pytest.raises(EstimatorOptionError, match=r"has no option 'singel'\. Did you mean 'single'"):
        build(RLLMGRPOTrainer, tmp_path, estimator="rloo", estimator_options={"singel": "zero"})
    with pytest.raises(LossOptionError, match=r"no option 'clip_ratoi'\. Did you mean 'clip_ratio'"):
        build(RLLMGRPOTrainer, tmp_path, loss="ppo", loss_options={"clip_ratoi": 0.1})
    with pytest.raises(LossOptionError, match=r"loss_agg_mode='prompt-mean' needs"):
        build(RLLMGRPOTrainer, tmp_path, loss="ppo", loss_agg_mode="prompt-mean")


def outcome_names_needing(fields: set[str]) -> list[str]:
    """Registered estimators that require one of ``fields``."""
    names = rllm.get_plugin_manager().estimators.names()
    return sorted(name for name in names if fields & set(rllm.get_estimator(name).requires))


def test_an_estimator_needing_what_trl_cannot_give_is_one_line_naming_the_field(tmp_path) -> None:
    from rllm.contract.fields import TOKEN_FIELDS
    from rllm_trl import RLLMGRPOTrainer

    token_level = outcome_names_needing(set(TOKEN_FIELDS))
    assert {"optimal_token_baseline", "distill"} <= set(token_level)
    cases = [("optimal_token_baseline", "old_log_probs"), ("distill", "teacher_log_probs")]
    for name, field in [*cases, ("remax", "baseline_rewards"), ("gae", "step_rewards")]:
        with pytest.raises(MissingInputError) as raised:
            build(RLLMGRPOTrainer, tmp_path, estimator=name)
        message = str(raised.value)
        assert f"{name!r} needs" in message and repr(field) in message and "\n" not in message


@pytest.mark.parametrize(
    ("config", "bridge", "named"),
    [
        ({"scale_rewards": "none"}, {}, "GRPOConfig.scale_rewards='none'"),
        ({"multi_objective_aggregation": "normalize_then_sum"}, {}, "GRPOConfig.multi_objective_aggregation"),
        ({"loss_type": "grpo"}, {"loss": "ppo"}, "GRPOConfig.loss_type='grpo'"),
        ({"epsilon": 0.3}, {"loss": "ppo"}, "GRPOConfig.epsilon=0.3"),
        ({"beta": 0.04}, {"loss": "trl.dapo"}, "use_bias_correction_kl"),
        ({"use_adaptive_entropy": True}, {"loss": "trl.dapo"}, "use_adaptive_entropy"),
    ],
)
def test_trl_settings_the_rllm_parts_replace_are_refused_naming_the_key(tmp_path, config, bridge, named) -> None:
    from rllm_trl import RLLMGRPOTrainer

    with pytest.raises(ConfigError) as raised:
        build(RLLMGRPOTrainer, tmp_path, config=config, **bridge)
    assert named in str(raised.value) and "\n" not in str(raised.value)


def test_trl_loss_fields_reach_the_trl_losses_and_loss_options_win(tmp_path) -> None:
    from rllm_trl import RLLMGRPOTrainer

    trainer = build(RLLMGRPOTrainer, tmp_path, config={"epsilon": 0.3, "loss_type": "grpo"}, loss="trl.grpo")
    assert trainer.rllm_loss.options["epsilon"] == 0.3 and trainer.rllm_loss.agg_mode == "seq-mean-token-mean"
    trainer = build(RLLMGRPOTrainer, tmp_path, config={"epsilon": 0.3}, loss="trl.dapo", loss_options={"epsilon": 0.1})
    assert trainer.rllm_loss.options["epsilon"] == 0.1


@pytest.mark.slow
def test_trl_grpo_with_a_kl_term_reproduces_trls_loss(tmp_path) -> None:
    """TRL's loss_type='grpo' with beta, and its metric kl: the reference model loaded from the same directory."""
    from trl import GRPOTrainer

    from rllm_trl import RLLMGRPOTrainer

    saved = tmp_path / "tiny"
    tiny_trl.model().save_pretrained(saved)
    tiny_trl.tokenizer().save_pretrained(saved)
    config = {
        "beta": 0.04,
        "use_bias_correction_kl": False,
        "loss_type": "grpo",
        "gradient_accumulation_steps": 2,
        "steps_per_generation": 2,
        "per_device_train_batch_size": 4,
    }
    losses, kl = [], []
    for cls, bridge in [(GRPOTrainer, {}), (RLLMGRPOTrainer, {"loss": "trl.grpo"})]:
        trainer = recorded(
            cls(
                model=str(saved),
                reward_funcs=[tiny_trl.count_a, tiny_trl.length_reward],
                args=tiny_trl.config(tmp_path / cls.__name__, **config),
                train_dataset=tiny_trl.dataset(),
                **bridge,
            )
        )
        tiny_trl.train(trainer)
        assert trainer.ref_model is not None
        losses.append(trainer.seen["loss"])
        kl.append(trainer.state.log_history[1]["kl"])
    theirs, ours = losses
    assert len(ours) == len(theirs) == 4
    assert kl[0] > 1e-4 and abs(kl[1] - kl[0]) <= 1e-6  # the second step's policy has left the reference
    assert all(abs(our - their) <= 1e-6 for our, their in zip(ours, theirs, strict=True)), (ours, theirs)


def scores(*rewards: float) -> torch.Tensor:
    """TRL's rewards_per_func for one reward function."""
    return torch.tensor(rewards, dtype=torch.float32).unsqueeze(1)


def test_groups_are_prompts_so_per_task_state_follows_a_prompt_across_steps(tmp_path) -> None:
    from rllm_trl import RLLMGRPOTrainer

    options = {"decay": 0.5}
    trainer = build(
        RLLMGRPOTrainer, tmp_path, rewards=[tiny_trl.count_a], estimator="ema_baseline", estimator_options=options
    )
    lengths = torch.ones(4)
    first = trainer.rllm_advantages(scores(1, 3, 0, 0), lengths, ["p", "p", "q", "q"], 2)
    assert first.tolist() == [-1.0, 1.0, 0.0, 0.0]  # a new prompt's baseline is its mean: p 2, q 0
    second = trainer.rllm_advantages(scores(2, 2, 4, 4), lengths, ["q", "q", "p", "p"], 2)
    assert second.tolist() == [2.0, 2.0, 2.0, 2.0]  # q against 0, p against 2: by prompt, not by position


def test_two_groups_of_one_prompt_in_a_batch_stay_two_groups(tmp_path) -> None:
    from rllm_trl import RLLMGRPOTrainer

    trainer = build(RLLMGRPOTrainer, tmp_path, rewards=[tiny_trl.count_a], estimator="rloo")
    advantages = trainer.rllm_advantages(scores(0, 2, 10, 10), torch.ones(4), ["p"] * 4, 2)
    assert advantages.tolist() == [-2.0, 2.0, 0.0, 0.0]  # one group of four: [-7.33, -4.67, 6, 6]
