"""A plugin's hook mistakes are answered with the right hook name, or with the missing decorator."""

from __future__ import annotations

from typing import Any

import pytest

import rllm
from rllm.errors import PluginWarning
from rllm.plugins.manager import PluginManager
from rllm.plugins.registry import Source


def _source(name: str) -> Source:
    return Source(name, "entry_point", f"dist-{name}", "1.0")


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
