"""Keys that change nothing as set: one rule for every key that acts only with its switch, said at every door.

The defaults compared against are the schema's; the expected messages are written out by hand.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from rllm.cli.main import main
from rllm.config import load_config
from rllm.config.algorithm import AlgorithmConfig
from rllm.config.unhonoured import switched_off, unhonoured_keys
from rllm.errors import ConfigError, RLLMWarning

A = "rllm.algorithm."


@pytest.mark.parametrize(
    ("override", "said"),
    [
        (f"{A}kl_loss_type=k2", f"{A}kl_loss_type='k2' has no effect without {A}use_kl_loss=true."),
        (f"{A}kl_loss_coef=0.01", f"{A}kl_loss_coef=0.01 has no effect without {A}use_kl_loss=true."),
        (f"{A}kl_beta=0.1", f"{A}kl_beta=0.1 has no effect without {A}use_kl_loss=true."),
        (f"{A}kl_penalty=k3", f"{A}kl_penalty='k3' has no effect without {A}use_kl_in_reward=true."),
        (f"{A}kl_ctrl.horizon=5", f"{A}kl_ctrl.horizon=5 has no effect without {A}use_kl_in_reward=true."),
        (
            f"{A}rollout_correction.tis_cap=3.0",
            f"{A}rollout_correction.tis_cap=3.0 has no effect without {A}rollout_correction.tis_mode (token or "
            "sequence).",
        ),
        (
            "rllm.workflow.ray.num_cpus=2.0",
            "rllm.workflow.ray.num_cpus=2.0 has no effect without rllm.workflow.executor=ray.",
        ),
        (
            "rllm.workflow.raise_on_error=false",
            "rllm.workflow.raise_on_error=False has no effect without a failure_policy other than drop_group.",
            # raise_on_error only acts outside drop_group: said with drop_group
        ),
    ],
)
def test_a_key_set_without_its_switch_is_said_once_at_load(override: str, said: str) -> None:
    extra = ["rllm.workflow.failure_policy=drop_group"] if "raise_on_error" in override else []
    with pytest.warns(RLLMWarning) as caught:
        load_config(overrides=[override, *extra])
    assert [str(w.message) for w in caught if "has no effect" in str(w.message)] == [said]


@pytest.mark.parametrize(
    "overrides",
    [
        [f"{A}use_kl_loss=true", f"{A}kl_loss_type=k2", f"{A}kl_loss_coef=0.01"],
        [f"{A}use_kl_in_reward=true", f"{A}kl_penalty=k3"],
        [f"{A}rollout_correction.tis_mode=token", f"{A}rollout_correction.tis_cap=3.0"],
        ["rllm.workflow.executor=ray", "rllm.workflow.ray.num_cpus=2.0"],
    ],
)
def test_with_its_switch_on_nothing_is_said(overrides: list[str]) -> None:
    assert switched_off(OmegaConf.merge(load_config(), OmegaConf.from_dotlist(overrides))) == []


def test_unhonoured_keys_compares_with_the_schemas_defaults() -> None:
    config = load_config(overrides=[f"{A}eps_clip=0.3", f"{A}kl_ctrl.kl_coef=0.001"])  # the second is the default
    keys = [f"{A}eps_clip", f"{A}kl_ctrl", f"{A}loss_options", "rllm.stepwise_advantage.enable"]
    assert unhonoured_keys(config, keys) == {f"{A}eps_clip": 0.3}


def test_every_door_says_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``rllm config``, a plain mapping handed to UnifiedTrainer (no load_config), ``rllm advantages -c``."""
    from rllm.trainer import UnifiedTrainer

    said = f"{A}rollout_correction.tis_cap=3.0 has no effect without"
    assert main(["config", f"{A}rollout_correction.tis_cap=3.0"]) == 0
    assert f"rllm: warning: {said}" in capsys.readouterr().err
    plain = {"rllm": {"algorithm": {"rollout_correction": {"tis_cap": 3.0}}, "trainer": {"output_dir": str(tmp_path)}}}
    with pytest.warns(RLLMWarning, match=said):
        UnifiedTrainer(None, plain, progress=False).shutdown()
    config = tmp_path / "c.yaml"
    config.write_text("rllm:\n  algorithm:\n    rollout_correction:\n      tis_cap: 3.0\n")
    rollouts = tmp_path / "r.jsonl"
    rollouts.write_text('{"group": "a", "reward": 1.0}\n{"group": "a", "reward": 0.0}\n')
    main(["advantages", "-c", str(config), str(rollouts)])
    assert f"rllm: warning: {said}" in capsys.readouterr().err


def test_kl_beta_is_rllms_name_of_kl_loss_coef() -> None:
    assert AlgorithmConfig().kl_loss_coef == 0.001  # verl's default
    assert AlgorithmConfig(use_kl_loss=True, kl_beta=0.05).kl_loss_coef == 0.05
    with pytest.warns(RLLMWarning, match="kl_beta=0.05 has no effect without"):
        config = load_config(overrides=[f"{A}kl_beta=0.05"])
    assert AlgorithmConfig.from_config(config).kl_loss_coef == 0.05
    with pytest.raises(ConfigError, match=r"kl_beta=0\.05 and kl_loss_coef=0\.2 are one setting"):
        load_config(overrides=[f"{A}kl_beta=0.05", f"{A}kl_loss_coef=0.2"])


def test_the_embedded_backend_says_what_it_cannot_honour_once(tmp_path: Path) -> None:
    """A switch the backend cannot honour is said by the backend; its dependent keys are not said again."""
    from rllm.trainer import UnifiedTrainer

    config = load_config(
        overrides=[f"rllm.trainer.output_dir={tmp_path}", f"{A}use_kl_loss=true", f"{A}kl_loss_coef=0.01"]
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        UnifiedTrainer(None, config, progress=False).shutdown()
    said = [str(w.message) for w in caught if "has no effect" in str(w.message)]
    assert said == [
        f"{A}use_kl_loss=True has no effect with the embedded backend: it keeps no reference policy, so there is no "
        "KL term."
    ]
