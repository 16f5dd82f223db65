"""Configuration: defaults, overrides, unknown keys, the estimator enum and AlgorithmConfig."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from rllm import AlgorithmConfig, ConfigError, load_config, rLLMAdvantageEstimator


def test_defaults_carry_the_documented_keys() -> None:
    config = load_config()
    assert config.rllm.algorithm.adv_estimator == "grpo"
    assert config.rllm.rollout.n == 8
    assert config.rllm.workflow.retry_limit == 3
    assert config.rllm.rejection_sample.min_trajs_per_group == 2
    assert config.algorithm.adv_estimator == "grpo"  # follows rllm.algorithm.adv_estimator


def test_override_of_rllm_key_reaches_algorithm_config() -> None:
    config = load_config(overrides=["rllm.algorithm.adv_estimator=rloo"])
    assert AlgorithmConfig.from_config(config).estimator is rLLMAdvantageEstimator.RLOO


def test_top_level_key_wins_when_set() -> None:
    config = load_config({"algorithm": {"adv_estimator": "reinforce"}})
    assert AlgorithmConfig.from_config(config).estimator is rLLMAdvantageEstimator.REINFORCE


def test_misspelled_key_names_it_and_suggests(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"'rllm\.algorithm\.adv_estimater'.*Did you mean 'rllm\.algorithm\.adv_estimator'"
    ):
        load_config(overrides=["rllm.algorithm.adv_estimater=rloo"])
    path = tmp_path / "run.yaml"
    path.write_text("rllm:\n  workflow:\n    n_paralel_tasks: 4\n")
    with pytest.raises(
        ConfigError, match=r"n_paralel_tasks.*run\.yaml.*Did you mean 'rllm\.workflow\.n_parallel_tasks'"
    ):
        load_config(path)


def test_open_mappings_accept_any_key() -> None:
    config = load_config(
        overrides=["rllm.algorithm.estimator_map.solver=rloo", "rllm.algorithm.estimator_options.preset=verl"]
    )
    algo = AlgorithmConfig.from_config(config)
    assert algo.estimator_map == {"solver": rLLMAdvantageEstimator.RLOO}
    assert algo.options_for("grpo") == {"preset": "verl"}


def test_override_without_equals_sign_is_an_error() -> None:
    with pytest.raises(ConfigError, match="key=value"):
        load_config(overrides=["rllm.algorithm.adv_estimator"])


def test_unknown_enum_value_maps_to_other_but_config_keeps_the_name() -> None:
    assert rLLMAdvantageEstimator("my_estimator") is rLLMAdvantageEstimator.OTHER
    algo = AlgorithmConfig.from_config(load_config(overrides=["rllm.algorithm.adv_estimator=my_estimator"]))
    assert algo.estimator == "my_estimator"


def test_per_step_mode_is_switched_to_broadcast_with_a_warning() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        algo = AlgorithmConfig(stepwise_advantage_mode="per_step")
    assert algo.stepwise_advantage_mode == "broadcast"
    assert any(issubclass(w.category, DeprecationWarning) for w in caught)


def test_invalid_values_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="epsilon"):
        AlgorithmConfig(epsilon=-1.0)
    with pytest.raises(ConfigError, match="nonfinite_rewards"):
        AlgorithmConfig(nonfinite_rewards="ignore")  # type: ignore[arg-type]


def test_options_scoped_to_one_estimator() -> None:
    algo = AlgorithmConfig(estimator_options={"preset": "verl", "rloo": {"single": "zero"}})
    assert algo.options_for("rloo") == {"preset": "verl", "single": "zero"}
    assert algo.options_for("grpo") == {"preset": "verl"}


def test_plugin_declared_section_accepts_its_own_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    from rllm.config import loading

    monkeypatch.setattr(loading, "_extra_open_keys", set())
    with pytest.raises(ConfigError, match=r"rllm\.my_backend"):
        load_config(overrides=["rllm.my_backend.endpoint=localhost:9000"])
    loading.register_open_key("rllm.my_backend")
    config = load_config(overrides=["rllm.my_backend.endpoint=localhost:9000", "rllm.my_backend.retries=2"])
    assert config.rllm.my_backend.endpoint == "localhost:9000" and config.rllm.my_backend.retries == 2
