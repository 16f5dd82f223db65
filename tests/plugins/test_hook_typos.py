"""A plugin's hook mistakes are answered with the right hook name, or with the missing decorator."""

from __future__ import annotations

from typing import Any

import pytest

import rllm
from rllm.errors import EstimatorNotFoundError, PluginWarning
from rllm.plugins.manager import PluginManager
from rllm.plugins.registry import Source


def _source(name: str) -> Source:
    return Source("plugin", name, f"dist-{name}", "1.0")


def test_config_sections_typo_is_matched_to_its_hook(plugin_manager: PluginManager) -> None:
    class Typo:
        @rllm.hookimpl
        def rllm_register_config_section(self, register: Any) -> None:  # missing the final "s"
            register("typo_section")

    with pytest.warns(PluginWarning) as caught:
        plugin_manager.register(Typo(), _source("typo"))
    message = str(caught[0].message)
    assert "'rllm_register_config_section' (did you mean 'rllm_register_config_sections'?)" in message
    assert "rllm_register_config_sections" in message.split("rllm's hooks are")[1]


def test_hook_without_the_decorator_gets_a_hint(plugin_manager: PluginManager) -> None:
    class Undecorated:
        def rllm_register_estimators(self, register: Any) -> None:
            register("never", lambda rewards, **_: (rewards, rewards))

    with pytest.warns(PluginWarning, match=r"rllm_register_estimators is not marked @rllm.hookimpl; add the decorator"):
        info = plugin_manager.register(Undecorated(), _source("undecorated"))
    assert info.status == "failed"


def test_plugin_that_registers_nothing_says_why(plugin_manager: PluginManager) -> None:
    class Dormant:
        @rllm.hookimpl
        def rllm_register_estimators(self, register: Any) -> None:
            return  # its framework is missing, so nothing to offer

        @staticmethod
        def rllm_inactive_reason() -> str:
            return "framework-x is not installed (pip install framework-x)"

    info = plugin_manager.register(Dormant(), _source("dormant"))
    assert (info.status, info.error) == ("inactive", "framework-x is not installed (pip install framework-x)")
    with pytest.raises(EstimatorNotFoundError) as caught:
        plugin_manager.estimators.resolve("dormant.grpo")
    assert "Plugin 'dormant', which would provide it, is inactive: framework-x is not installed" in str(caught.value)
    with pytest.raises(EstimatorNotFoundError, match="No plugin named 'absent' is installed"):
        plugin_manager.estimators.resolve("absent.grpo")


def test_config_naming_an_inactive_plugins_estimator(plugin_manager: PluginManager) -> None:
    from rllm.config import load_config
    from rllm.errors import ConfigError

    with pytest.raises(ConfigError, match="No plugin named 'tinker' is installed"):
        load_config(overrides=["rllm.algorithm.adv_estimator=tinker.grpo"])
