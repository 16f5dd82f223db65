"""AlgorithmConfig as rLLM has it today: new fields and defaults, (estimator, loss_fn) pairs,
``from_config`` in both call forms, the ``use_rllm`` deprecation and ``per_step`` coercion;
and the trainer-stage configs (compact filtering, rejection sampling, transform)."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from rllm import ConfigError, load_config
from rllm.errors import RLLMDeprecationWarning
from rllm.trainer.algorithms.config import (
    AlgorithmConfig,
    CompactFilteringConfig,
    RejectionSamplingConfig,
    RolloutCorrectionConfig,
    TransformConfig,
    rLLMAdvantageEstimator,
)
from rllm.types import TerminationReason


def _quiet(**fields: object) -> AlgorithmConfig:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # none of these may warn
        return AlgorithmConfig(**fields)  # type: ignore[arg-type]


def test_new_fields_have_upstreams_defaults() -> None:
    config = _quiet()
    assert config.use_rllm is None
    assert config.loss_fn_map == {}
    assert config.loss_fn is None
    assert config.lr_schedule == "constant"
    assert config.warmup_steps == -1
    assert config.warmup_steps_ratio == 0.0
    assert config.kl_beta == 0.0
    assert config.eps_clip == 0.2
    assert config.eps_clip_high is None
    assert config.loss_agg_mode is None
    assert config.router_replay == "disabled"
    assert config.rollout_correction == RolloutCorrectionConfig(tis_mode=None, bypass_mode=None, tis_cap=2.0)
    assert rLLMAdvantageEstimator("prpo") is rLLMAdvantageEstimator.PRPO


def test_estimator_loss_pairs_are_split_into_loss_fn_map() -> None:
    config = _quiet(
        estimator_map={
            "solver": (rLLMAdvantageEstimator.GRPO, "ppo"),
            "judge": "reinforce",
            "critic": ["rloo", "cispo"],
        },
        loss_fn="importance_sampling",
    )
    assert config.estimator_map == {
        "solver": rLLMAdvantageEstimator.GRPO,
        "judge": rLLMAdvantageEstimator.REINFORCE,
        "critic": rLLMAdvantageEstimator.RLOO,
    }
    assert config.loss_fn_map == {"solver": "ppo", "critic": "cispo"}
    assert config.loss_fn_for("solver") == "ppo"
    assert config.loss_fn_for("judge") == "importance_sampling"
    with pytest.raises(ConfigError, match=r"estimator_map\['solver'\].*3 elements"):
        AlgorithmConfig(estimator_map={"solver": ("grpo", "ppo", "extra")})


def test_invalid_choices_name_the_key() -> None:
    with pytest.raises(ConfigError, match=r"rllm\.algorithm\.loss_agg_mode"):
        AlgorithmConfig(loss_agg_mode="token-average")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"rllm\.algorithm\.router_replay"):
        AlgorithmConfig(router_replay="R4")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"rllm\.algorithm\.lr_schedule"):
        AlgorithmConfig(lr_schedule="step")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="tis_mode"):
        RolloutCorrectionConfig(tis_mode="batch")  # type: ignore[arg-type]


def test_use_rllm_warns_that_it_is_deprecated() -> None:
    with pytest.warns(RLLMDeprecationWarning, match="use_rllm is deprecated"):
        config = AlgorithmConfig(use_rllm=True)
    assert config.use_rllm is True
    section = OmegaConf.create({"adv_estimator": "grpo", "use_rllm": True})
    with pytest.warns(RLLMDeprecationWarning, match="use_rllm is deprecated"):
        AlgorithmConfig.from_config(section)


def test_use_rllm_warns_under_python_default_filters(tmp_path: Path) -> None:
    """Python shows DeprecationWarning only for code in __main__; the notice reaches a config built in a module."""
    (tmp_path / "user_code.py").write_text(
        "from rllm.config.algorithm import AlgorithmConfig\nAlgorithmConfig(use_rllm=True)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", "import user_code"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and "use_rllm is deprecated and ignored" in done.stderr, done.stderr


def test_per_step_is_coerced_to_broadcast_with_a_deprecation_warning() -> None:
    with pytest.warns(RLLMDeprecationWarning, match="per_step"):
        config = AlgorithmConfig(stepwise_advantage_mode="per_step")
    assert config.stepwise_advantage_mode == "broadcast"
    with pytest.warns(RLLMDeprecationWarning, match="per_step"):
        config = AlgorithmConfig.from_config(
            OmegaConf.create({"adv_estimator": "grpo"}), stepwise_advantage_mode="per_step"
        )
    assert config.stepwise_advantage_mode == "broadcast"


SECTION = """
adv_estimator: rloo
norm_adv_by_std_in_grpo: false
use_precomputed_advantage: true
loss_fn: cispo
loss_agg_mode: seq-mean-token-mean
lr_schedule: cosine
warmup_steps: 10
warmup_steps_ratio: 0.1
kl_beta: 0.01
eps_clip: 0.25
eps_clip_high: 0.28
router_replay: R3
rollout_correction:
  bypass_mode: true
  tis_mode: token
  tis_cap: 3.0
"""


def _check_section_fields(config: AlgorithmConfig) -> None:
    assert config.estimator is rLLMAdvantageEstimator.RLOO
    assert config.norm_adv_by_std_in_grpo is False
    assert config.use_precomputed_advantage is True
    assert (config.loss_fn, config.loss_agg_mode, config.lr_schedule) == ("cispo", "seq-mean-token-mean", "cosine")
    assert (config.warmup_steps, config.warmup_steps_ratio) == (10, 0.1)
    assert (config.kl_beta, config.eps_clip, config.eps_clip_high) == (0.01, 0.25, 0.28)
    assert config.router_replay == "R3"
    assert config.rollout_correction == RolloutCorrectionConfig(tis_mode="token", bypass_mode=True, tis_cap=3.0)


def test_from_config_with_the_algorithm_section_as_rllm_calls_it_today() -> None:
    section = OmegaConf.create(SECTION)
    pairs = {"solver": ("grpo", "ppo"), "judge": "reinforce"}
    config = _quiet_from(section, estimator_map=pairs)
    _check_section_fields(config)
    assert config.stepwise_advantage_mode == "broadcast"
    assert config.estimator_map == {"solver": rLLMAdvantageEstimator.GRPO, "judge": rLLMAdvantageEstimator.REINFORCE}
    assert config.loss_fn_map == {"solver": "ppo"}
    # A plain dict works as well as a DictConfig; a misspelled key is named.
    assert AlgorithmConfig.from_config({"adv_estimator": "prpo"}).estimator is rLLMAdvantageEstimator.PRPO
    with pytest.raises(ConfigError, match=r"'eps_clipp'.*Did you mean 'eps_clip'"):
        AlgorithmConfig.from_config({"adv_estimator": "grpo", "eps_clipp": 0.1})
    with pytest.raises(ConfigError, match=r"'rllm\.algorithm\.rollout_correction\.tis_capp'"):
        AlgorithmConfig.from_config({"adv_estimator": "grpo", "rollout_correction": {"tis_capp": 3.0}})


def test_from_config_with_the_whole_run_config_as_before() -> None:
    whole = OmegaConf.create({"rllm": {"algorithm": OmegaConf.create(SECTION)}})
    _check_section_fields(_quiet_from(whole))
    # With the project's defaults file: seed keys keep working, the map may be given by keyword.
    config = AlgorithmConfig.from_config(load_config(), estimator_map={"judge": ("rloo", "importance_sampling")})
    assert config.estimator is rLLMAdvantageEstimator.GRPO
    assert config.estimator_map == {"judge": rLLMAdvantageEstimator.RLOO}
    assert config.loss_fn_map == {"judge": "importance_sampling"}
    assert config.use_rllm is None  # the defaults' `use_rllm: false` is not a use of the key
    # The section of the same file, as rLLM's trainer passes it today.
    defaults = load_config()
    section = _quiet_from(defaults.rllm.algorithm, stepwise_advantage_mode=defaults.rllm.stepwise_advantage.mode)
    assert section == _quiet_from(defaults)


def _quiet_from(config: object, **kwargs: object) -> AlgorithmConfig:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return AlgorithmConfig.from_config(config, **kwargs)  # type: ignore[arg-type]


def test_compact_filtering_should_mask_by_reason() -> None:
    off = CompactFilteringConfig(mask_timeout=True)
    assert not off.should_mask(TerminationReason.TIMEOUT)  # nothing is masked unless enabled
    config = CompactFilteringConfig.from_config({"enable": True, "mask_timeout": True, "mask_error": True})
    assert config.should_mask(TerminationReason.TIMEOUT)
    assert config.should_mask("error")
    assert not config.should_mask(TerminationReason.ENV_DONE)
    assert not config.should_mask(None)
    every = CompactFilteringConfig(enable=True, **{f"mask_{r.value}": True for r in TerminationReason})
    assert all(every.should_mask(r) for r in TerminationReason)
    with pytest.raises(ConfigError, match=r"rllm\.compact_filtering\.mask_timout"):
        CompactFilteringConfig.from_config({"mask_timout": True})


def test_rejection_sampling_modes_and_defaults() -> None:
    assert RejectionSamplingConfig() == RejectionSamplingConfig("none", 2, 1, False)
    assert RejectionSamplingConfig.from_config({"enable": True}).mode == "episode"
    assert RejectionSamplingConfig.from_config({"enable": False}).mode == "none"
    assert RejectionSamplingConfig.from_config({"enable": True, "mode": "group"}).mode == "group"
    section = OmegaConf.create(
        {
            "enable": True,
            "multiplier": 1,
            "min_partial_solve_tasks": 3,
            "min_trajs_per_group": 4,
            "filter_uniform_groups": True,
        }
    )
    config = RejectionSamplingConfig.from_config(section)
    assert config == RejectionSamplingConfig("episode", 4, 3, True)
    with pytest.raises(ConfigError, match=r"rllm\.rejection_sample\.mode='batches'"):
        RejectionSamplingConfig(mode="batches")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="min_trajs_per_group"):
        RejectionSamplingConfig(min_trajs_per_group=0)


def test_transform_config_defaults() -> None:
    assert TransformConfig() == TransformConfig(True, "default_traj_name", False, True)
    config = TransformConfig.from_config({"drop_unnamed_traj": True}, broadcast=False)
    assert (config.drop_unnamed_traj, config.broadcast, config.impute_missing_names) == (True, False, True)
