"""KL in the reward on the transformers backend: real short runs of the tiny model."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pytest
from extras import skip_module_without

skip_module_without("torch", "transformers", "safetensors", install="pip install 'rllm[transformers]' (CI does)")

from omegaconf import DictConfig

from rllm.errors import ConfigError, RLLMWarning
from rllm.trainer import UnifiedTrainer
from rllm.trainer.logging import METRICS_FILE, read_metrics

MakeConfig = Callable[..., DictConfig]
ROWS = 16
"""Sequences per step of the small runs (4 tasks x 4 rollouts, one step each): the controller's n_steps."""
ADAPTIVE = (
    "rllm.algorithm.use_kl_in_reward=true",
    "rllm.algorithm.kl_ctrl.type=adaptive",
    "rllm.algorithm.kl_ctrl.kl_coef=0.05",
    "rllm.algorithm.kl_ctrl.target_kl=0.01",
    "rllm.algorithm.kl_ctrl.horizon=40",
)


def _fit(config: DictConfig) -> tuple[UnifiedTrainer, list[dict]]:
    trainer = UnifiedTrainer(None, config, progress=False)
    try:
        trainer.fit()
    finally:
        trainer.shutdown()
    return trainer, [r for r in read_metrics(trainer.output_dir / METRICS_FILE) if r["kind"] == "train"]


def test_a_short_run_logs_the_coefficient_and_a_finite_kl_and_adapts_by_the_rule(tiny_config: MakeConfig) -> None:
    trainer, steps = _fit(tiny_config(*ADAPTIVE, "rllm.trainer.total_batches=4", "rllm.transformers.lr=0.02"))
    assert trainer.backend.reference is not None
    assert [r["step"] for r in steps] == [1, 2, 3, 4]
    kls = [r["kl_in_reward/kl"] for r in steps]
    coefs = [r["kl_in_reward/coef"] for r in steps]
    # step 1 samples with the reference itself: 0 up to float rounding (the passes run in train and eval mode)
    assert all(math.isfinite(kl) for kl in kls) and abs(kls[0]) < 1e-6
    assert max(kls[1:]) > 0  # the policy moved away from the reference
    assert coefs[0] == 0.05
    for before, after, kl in zip(coefs, coefs[1:], kls, strict=False):
        error = min(max(kl / 0.01 - 1, -0.2), 0.2)
        assert after == pytest.approx(before * (1 + error * ROWS / 40), rel=1e-9)
    for r in steps:  # the estimator saw the raw reward minus the mean penalty of a trajectory
        assert r["reward/solver/mean"] == pytest.approx(r["batch/reward"] - r["kl_in_reward/penalty"], abs=1e-9)
    assert any(r["kl_in_reward/penalty"] != 0 for r in steps)


def test_a_zero_coefficient_trains_exactly_as_without_the_switch(tiny_config: MakeConfig, tmp_path: Path) -> None:
    steps = "rllm.trainer.total_batches=4"
    _, plain = _fit(tiny_config(steps, f"rllm.trainer.output_dir={tmp_path / 'plain'}"))
    _, zero = _fit(
        tiny_config(
            steps,
            "rllm.algorithm.use_kl_in_reward=true",
            "rllm.algorithm.kl_ctrl.kl_coef=0.0",
            f"rllm.trainer.output_dir={tmp_path / 'zero'}",
        )
    )
    _, some = _fit(
        tiny_config(
            steps,
            "rllm.algorithm.use_kl_in_reward=true",
            "rllm.algorithm.kl_ctrl.kl_coef=1.0",
            f"rllm.trainer.output_dir={tmp_path / 'some'}",
        )
    )

    def model_metrics(records: list[dict]) -> list[dict]:
        return [{k: v for k, v in r.items() if k.startswith(("actor/", "advantage/"))} for r in records]

    assert model_metrics(zero) == model_metrics(plain)
    assert all(r["kl_in_reward/coef"] == 0.0 for r in zero)
    # the policy moves away from the reference only once a step had a signal (a group with differing rewards)
    moved = [i + 1 for i, r in enumerate(plain[:-1]) if r["advantage/solver/std"] > 0]
    assert moved, "no step of the plain run updated the policy; the comparison below needs one"
    after = moved[0]
    assert all(r["kl_in_reward/kl"] == 0.0 for r in some[:after])  # the policy is still the reference
    # k1 (log-prob difference, the default estimator) is unbiased but a batch's mean may be either sign
    assert some[after]["kl_in_reward/kl"] != 0 and model_metrics(some)[after] != model_metrics(plain)[after]


def test_kl_in_the_reward_and_in_the_loss_together(tiny_config: MakeConfig) -> None:
    _, steps = _fit(
        tiny_config(
            "rllm.algorithm.use_kl_in_reward=true",
            "rllm.algorithm.kl_penalty=k3",
            "rllm.algorithm.use_kl_loss=true",
            "rllm.algorithm.kl_beta=0.1",
            "rllm.algorithm.kl_loss_type=k2",
        )
    )
    assert all(r["kl_in_reward/kl"] >= 0 and r["actor/kl_loss"] >= 0 for r in steps)  # k3 and k2 are never negative
    assert all(r["kl_in_reward/coef"] == 0.001 for r in steps)  # fixed, verl's default


def test_resume_restores_the_adapted_coefficient(tiny_config: MakeConfig, tmp_path: Path) -> None:
    run = (*ADAPTIVE, "rllm.trainer.total_batches=4", "rllm.trainer.save_freq=2")
    _, clean = _fit(tiny_config(*run, f"rllm.trainer.output_dir={tmp_path / 'clean'}"))
    split = (*ADAPTIVE, f"rllm.trainer.output_dir={tmp_path / 'split'}")
    _fit(tiny_config(*split, "rllm.trainer.total_batches=2"))
    _, resumed = _fit(tiny_config(*split, "rllm.trainer.total_batches=4", "rllm.trainer.save_freq=2"))
    coefs = [r["kl_in_reward/coef"] for r in clean]
    assert coefs[2] != 0.05  # adapted by step 3: a restart from kl_coef would differ
    assert [r["step"] for r in resumed] == [1, 2, 3, 4]  # the metrics file holds both halves
    assert [r["kl_in_reward/coef"] for r in resumed] == coefs
    assert [r["kl_in_reward/kl"] for r in resumed] == [r["kl_in_reward/kl"] for r in clean]


def test_a_horizon_below_the_batch_keeps_the_coefficient_positive_and_the_run_resumes(
    tiny_config: MakeConfig, tmp_path: Path
) -> None:
    """16 sequences per step and horizon 1: verl's factor would be 1 - 0.2 * 16 = -2.2 at step 1's zero KL."""
    run = (*ADAPTIVE[:2], "rllm.algorithm.kl_ctrl.kl_coef=0.001", "rllm.algorithm.kl_ctrl.horizon=1")
    out = f"rllm.trainer.output_dir={tmp_path / 'run'}"
    _, first = _fit(tiny_config(*run, out, "rllm.trainer.total_batches=2", "rllm.trainer.save_freq=1"))
    coefs = [r["kl_in_reward/coef"] for r in first]
    assert coefs[0] == 0.001 and abs(first[0]["kl_in_reward/kl"]) < 1e-6
    assert coefs[1] == pytest.approx(0.001 * 0.8, rel=1e-12)  # below target by the clip's 20%, one horizon at most
    _, resumed = _fit(tiny_config(*run, out, "rllm.trainer.total_batches=3", "rllm.trainer.save_freq=1"))
    assert [r["step"] for r in resumed] == [1, 2, 3]  # resumed from its own step-2 checkpoint
    assert resumed[2]["kl_in_reward/coef"] > 0


def test_controller_keys_without_the_switch_warn(tiny_config: MakeConfig) -> None:
    with pytest.warns(RLLMWarning, match=r"kl_ctrl\.type='adaptive' has no effect without .*use_kl_in_reward=true"):
        trainer = UnifiedTrainer(None, tiny_config("rllm.algorithm.kl_ctrl.type=adaptive"), progress=False)
    assert trainer.backend.kl_in_reward is None and trainer.backend.reference is None
    trainer.shutdown()


def test_an_estimator_that_reads_reward_components_is_refused(tiny_config: MakeConfig) -> None:
    config = tiny_config("rllm.algorithm.adv_estimator=gdpo", "rllm.algorithm.use_kl_in_reward=true")
    with pytest.raises(
        ConfigError, match=r"use_kl_in_reward=true .* estimator 'gdpo' reads reward_components"
    ) as caught:
        UnifiedTrainer(None, config, progress=False)
    assert "\n" not in str(caught.value)
