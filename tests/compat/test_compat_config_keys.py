"""rLLM's configuration keys: loaded and used, said to have no effect, or refused as another subsystem's."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from rllm import AlgorithmConfig
from rllm.config import load_config
from rllm.errors import ConfigError

RLLM_ALGORITHM_BLOCK = """
rllm:
  algorithm:
    adv_estimator: grpo
    norm_adv_by_std_in_grpo: true
    use_precomputed_advantage: false
    loss_fn: ppo
    loss_agg_mode: token-mean
    lr_schedule: cosine
    warmup_steps: 3
    warmup_steps_ratio: 0.0
    kl_beta: 0.0
    eps_clip: 0.2
    eps_clip_high: 0.28
    router_replay: disabled
    rollout_correction:
      bypass_mode: true
      tis_mode: token
      tis_cap: 2.0
  stepwise_advantage:
    enable: false
    mode: broadcast
    norm_adv_by_std_in_grpo: true
  rejection_sample:
    enable: false
    multiplier: 1
    min_partial_solve_tasks: 1
    min_trajs_per_group: 2
"""


def test_rllms_algorithm_section_loads_and_reaches_algorithm_config(tmp_path: Path) -> None:
    path = tmp_path / "rllm.yaml"
    path.write_text(RLLM_ALGORITHM_BLOCK)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # rLLM's block carries kl_beta at rLLM's default, 0: nothing to say
        config = AlgorithmConfig.from_config(load_config(path))
    assert config.kl_loss_coef == 0.001  # verl's default stays in force
    assert (config.loss_agg_mode, config.warmup_steps, config.eps_clip_high) == ("token-mean", 3, 0.28)
    assert (config.rollout_correction.tis_mode, config.rollout_correction.bypass_mode) == ("token", True)


def test_the_seeds_stepwise_std_switch_wins_only_when_set(tmp_path: Path) -> None:
    set_false = load_config(overrides=["rllm.stepwise_advantage.norm_adv_by_std_in_grpo=false"])
    assert AlgorithmConfig.from_config(set_false).norm_adv_by_std_in_grpo is False
    algorithm_false = load_config(overrides=["rllm.algorithm.norm_adv_by_std_in_grpo=false"])
    assert AlgorithmConfig.from_config(algorithm_false).norm_adv_by_std_in_grpo is False


@pytest.mark.parametrize(
    ("override", "subsystem"),
    [
        ("+rllm.remote_runtime.url=http://x", "remote runtimes"),
        ("+rllm.data.max_prompt_length=512", "tokenised datasets"),
        ("+rllm.workflow.use_workflow=true", "workflow registry"),
    ],
)
def test_keys_of_subsystems_rllm_does_not_have_say_so(override: str, subsystem: str) -> None:
    with pytest.raises(ConfigError, match=rf"belongs to rLLM.s {subsystem}\b.*, which rllm does not have"):
        load_config(overrides=[override])


def test_embedded_backend_says_which_keys_it_cannot_honour(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "rllm.cli.main",
            "train",
            "rllm.trainer.total_batches=1",
            "rllm.trainer.val_before_train=false",
            "rllm.trainer.test_freq=0",
            "rllm.trainer.logger=[jsonl]",
            f"rllm.trainer.output_dir={tmp_path / 'run'}",
            "rllm.algorithm.kl_beta=0.1",
            "rllm.algorithm.router_replay=R2",
            "rllm.stepwise_advantage.enable=true",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={"RLLM_DISABLED_PLUGINS": "fast", "PATH": "/usr/bin:/bin", "MPLBACKEND": "Agg"},
    )
    assert done.returncode == 0, done.stderr
    assert "rllm.algorithm.kl_beta=0.1 has no effect without rllm.algorithm.use_kl_loss=true" in done.stderr
    assert "rllm.algorithm.router_replay='R2' has no effect with the embedded backend" in done.stderr
    assert "rllm.stepwise_advantage.enable=True has no effect with the embedded backend" in done.stderr
    assert "eps_clip" not in done.stderr  # left at its default: nothing to say
