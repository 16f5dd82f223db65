"""Configuration: defaults, overrides, unknown keys, the estimator enum and AlgorithmConfig."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf

from rllm import AlgorithmConfig, ConfigError, hookimpl, load_config, rLLMAdvantageEstimator
from rllm.config import ConfigKey, current_schema
from rllm.errors import PluginHookError, PluginWarning, RLLMDeprecationWarning
from rllm.plugins import PluginManager
from rllm.plugins.registry import Source


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
    assert AlgorithmConfig(estimator="my_estimator").estimator == "my_estimator"


def test_unregistered_estimator_name_is_refused_when_loading() -> None:
    with pytest.raises(ConfigError, match=r"^rllm\.algorithm\.adv_estimator must be one of .*got 'rlooo'\. Did you"):
        load_config(overrides=["rllm.algorithm.adv_estimator=rlooo"])


def test_per_step_mode_is_switched_to_broadcast_with_a_warning() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        algo = AlgorithmConfig(stepwise_advantage_mode="per_step")
    assert algo.stepwise_advantage_mode == "broadcast"
    assert any(issubclass(w.category, RLLMDeprecationWarning) for w in caught)


def test_invalid_values_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="epsilon"):
        AlgorithmConfig(epsilon=-1.0)
    with pytest.raises(ConfigError, match="nonfinite_rewards"):
        AlgorithmConfig(nonfinite_rewards="ignore")  # type: ignore[arg-type]


def test_options_scoped_to_one_estimator() -> None:
    algo = AlgorithmConfig(estimator_options={"preset": "verl", "rloo": {"single": "zero"}})
    assert algo.options_for("rloo") == {"preset": "verl", "single": "zero"}
    assert algo.options_for("grpo") == {"preset": "verl"}


class SectionPlugin:
    """Declares a typed section and an open one through the config hook."""

    @hookimpl
    def rllm_register_config_sections(self, register: Any) -> None:
        register(
            "rllm.my_backend",
            [
                ConfigKey("endpoint", "str", "localhost:9000", "Address of the service."),
                ConfigKey("retries", "int", 2, "Attempts per request.", minimum=0),
            ],
        )
        register("rllm.my_backend_extra")


@pytest.fixture
def section_plugin(plugin_manager: PluginManager) -> None:
    plugin_manager.register(SectionPlugin(), Source("plugin", "sections", "rllm-sections", "1.0"))


def test_declared_sections_are_listed_with_their_plugin(plugin_manager: PluginManager) -> None:
    info = plugin_manager.register(SectionPlugin(), Source("plugin", "sections", "rllm-sections", "1.0"))
    assert info.status == "ok" and info.config_sections == ["rllm.my_backend", "rllm.my_backend_extra"]
    assert "rllm.my_backend.retries" in current_schema().by_path()


class HalfDeclared:
    """Registers an estimator, declares a section, then its config hook raises."""

    @hookimpl
    def rllm_register_estimators(self, register: Any) -> None:
        register("half_declared", lambda rewards, **kw: rewards)

    @hookimpl
    def rllm_register_config_sections(self, register: Any) -> None:
        register("rllm.half", [ConfigKey("size", "int", 1, "A size.")])
        raise RuntimeError("settings server unreachable")


def test_a_config_hook_that_raises_fails_its_plugin_and_rolls_it_back(plugin_manager: PluginManager) -> None:
    with pytest.warns(PluginWarning, match=r"'half'.*RuntimeError: settings server unreachable"):
        info = plugin_manager.register(HalfDeclared(), Source("plugin", "half", "rllm-half", "1.0"))
    assert info.status == "failed" and info.config_sections == []
    assert "half_declared" not in plugin_manager.estimators
    assert "rllm.half.size" not in current_schema().by_path()


def test_strict_mode_counts_a_config_hook_that_raises(
    plugin_manager: PluginManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RLLM_STRICT_PLUGINS", "1")
    with pytest.raises(PluginHookError, match="'half'"):
        plugin_manager.register(HalfDeclared(), Source("plugin", "half", "rllm-half", "1.0"))


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        (["endpoint"], "declares 'endpoint', which is not a rllm.config.ConfigKey"),
        (None, "is not a dotted section name"),
    ],
)
def test_a_wrong_section_declaration_is_refused_naming_the_plugin(
    plugin_manager: PluginManager, keys: Any, message: str
) -> None:
    class Wrong:
        @hookimpl
        def rllm_register_config_sections(self, register: Any) -> None:
            register("rllm.wrong" if keys else "rllm.wrong.", keys)

    with pytest.warns(PluginWarning, match=rf"'wrong'.*{message}"):
        info = plugin_manager.register(Wrong(), Source("plugin", "wrong", "rllm-wrong", "1.0"))
    assert info.status == "failed"


def test_a_config_key_of_unknown_type_is_refused_where_it_is_made() -> None:
    with pytest.raises(ConfigError, match=r"Config key size has unknown type 'integer'; use one of int, "):
        ConfigKey("size", "integer", 1, "A size.")  # type: ignore[arg-type]


def test_plugin_declared_section_gets_defaults_and_checks(section_plugin: None) -> None:
    config = load_config(overrides=["rllm.my_backend.retries=5", "rllm.my_backend_extra.anything=[1, 2]"])
    assert config.rllm.my_backend.endpoint == "localhost:9000" and config.rllm.my_backend.retries == 5
    assert list(config.rllm.my_backend_extra.anything) == [1, 2]
    with pytest.raises(ConfigError, match=r"^rllm\.my_backend\.retries must be an integer >= 0; got -1 \(int\)\.$"):
        load_config(overrides=["rllm.my_backend.retries=-1"])
    with pytest.raises(
        ConfigError, match=r"Unknown config key 'rllm\.my_backend\.retrys'.*'rllm\.my_backend\.retries'"
    ):
        load_config(overrides=["rllm.my_backend.retrys=1"])


def test_sections_are_unknown_without_the_plugin() -> None:
    with pytest.raises(ConfigError, match=r"rllm\.my_backend"):
        load_config(overrides=["rllm.my_backend.endpoint=localhost:9000"])


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["+rllm.algorithm.estimator_options.preset=verl"], {"preset": "verl"}),
        (
            ["rllm.algorithm.estimator_options.preset=verl", "++rllm.algorithm.estimator_options.preset=trl"],
            {"preset": "trl"},
        ),
        (["rllm.algorithm.estimator_options.preset=verl", "~rllm.algorithm.estimator_options.preset"], {}),
        (["rllm.algorithm.estimator_options.preset=verl", "~rllm.algorithm.estimator_options.preset=verl"], {}),
        (["rllm.algorithm.estimator_options={preset: verl}", "~rllm.algorithm.estimator_options"], {}),
    ],
)
def test_hydra_add_force_and_delete(overrides: list[str], expected: dict[str, str]) -> None:
    options = load_config(overrides=overrides).rllm.algorithm.estimator_options
    assert OmegaConf.to_container(options) == expected


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("+rllm.trainer.total_epochs=3", r"Could not add 'rllm\.trainer\.total_epochs': it is already set"),
        ("~rllm.algorithm.estimator_options.preset", r"Could not delete 'rllm\.algorithm\.estimator_options\.preset'"),
        ("~rllm.trainer.total_epochs=4", r"its value is 10, not 4"),
        ("+++rllm.trainer.total_epochs=3", r"use key=value, \+key=value or \+\+key=value"),
    ],
)
def test_hydra_grammar_errors(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(overrides=[override])


def test_deleting_a_schema_key_restores_its_default(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text("rllm:\n  trainer:\n    total_epochs: 3\n")
    assert load_config(path, overrides=["~rllm.trainer.total_epochs"]).rllm.trainer.total_epochs == 10


def test_string_booleans_are_refused_in_config_and_in_the_dataclass(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text("rllm:\n  algorithm:\n    norm_adv_by_std_in_grpo: 'false'\n")
    with pytest.raises(ConfigError, match=r"norm_adv_by_std_in_grpo must be true or false; got 'false' \(str\)"):
        load_config(path)
    with pytest.raises(ConfigError, match=r"norm_adv_by_std_in_grpo must be true or false; got 'maybe'"):
        AlgorithmConfig(norm_adv_by_std_in_grpo="maybe")  # type: ignore[arg-type]
    yaml_false = load_config(overrides=["rllm.algorithm.norm_adv_by_std_in_grpo=false"])
    assert AlgorithmConfig.from_config(yaml_false).norm_adv_by_std_in_grpo is False


def test_interpolations_are_kept_and_numbers_become_strings_for_string_keys() -> None:
    config = load_config(overrides=["rllm.trainer.experiment_name=2024"])
    assert config.rllm.trainer.experiment_name == "2024"
    assert config.rllm.trainer.output_dir == "runs/rllm/2024"
    assert OmegaConf.to_container(config)["rllm"]["trainer"]["output_dir"].startswith("runs/${")


def test_every_schema_key_has_a_doc_and_a_valid_default() -> None:
    for key in current_schema().keys:
        assert key.doc.strip(), key.path
        if not (isinstance(key.default, str) and "${" in key.default):
            assert key.check(key.default) == key.default, key.path


def _alias_bomb(levels: int) -> str:
    lines = ["a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("omegaconf_bounds_it", [True, False])
def test_yaml_alias_bombs_are_refused_whatever_omegaconf_bounds(
    tmp_path, monkeypatch: pytest.MonkeyPatch, omegaconf_bounds_it: bool
) -> None:
    """OmegaConf 2.3 (what rllm[verl] installs: hydra-core pins it) has no expansion bound of its own."""
    from rllm.config import expansion
    from rllm.errors import ConfigError

    monkeypatch.setattr(expansion, "_BOUNDED", omegaconf_bounds_it and expansion._BOUNDED)
    for name, text in (("bomb", _alias_bomb(12)), ("loop", "a: &x [1, *x]\n")):  # 10**12 nodes; an endless list
        (tmp_path / f"{name}.yaml").write_text(text)
        with pytest.raises(ConfigError, match="uses YAML aliases that expand to more than 10,000 nodes"):
            load_config(tmp_path / f"{name}.yaml")
    (tmp_path / "fine.yaml").write_text("rllm:\n  trainer: &t {total_batches: 3}\nother: *t\n")
    with pytest.raises(ConfigError, match="other"):  # aliases within the bound read on (to the unknown key)
        load_config(tmp_path / "fine.yaml")
