"""The kit's ``plugin=`` takes a plugin's name; a module name or an unknown one is said so, not "registered nothing"."""

from __future__ import annotations

import pytest

from rllm.errors import ConformanceError
from rllm.plugins import PluginManager
from rllm.testing import all_checks


def test_a_module_name_is_answered_with_the_plugins_name(plugin_manager: PluginManager) -> None:
    with pytest.raises(
        ConformanceError, match=r"'rllm_builtin' is the module of plugin 'builtin': pass plugin='builtin'"
    ):
        all_checks(plugin="rllm_builtin")


def test_an_unknown_plugin_is_no_such_plugin(plugin_manager: PluginManager) -> None:
    with pytest.raises(ConformanceError, match=r"No plugin named 'my_estimators' is loaded .*lists: builtin\)\.$"):
        all_checks(plugin="my_estimators")


def test_the_plugins_name_selects_its_parts(plugin_manager: PluginManager) -> None:
    assert len(all_checks(plugin="builtin")) > 50
