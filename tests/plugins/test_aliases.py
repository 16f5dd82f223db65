"""A core path of a plugin's module: the same module when the plugin is there, one line naming the plugin when not."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from rllm.errors import PluginLoadError
from rllm.plugins.aliases import become_plugin_module


@pytest.fixture
def plugin_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A package ``alias_plugin_pkg``: ``mod`` (X = 1), and ``needy``, which imports a module that is missing."""
    package = tmp_path / "alias_plugin_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "mod.py").write_text("X = 1\n")
    (package / "needy.py").write_text("import alias_missing_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("RLLM_DISABLED_PLUGINS", raising=False)
    for name in ("alias_core_path", "alias_plugin_pkg", "alias_plugin_pkg.mod"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    return "alias_plugin_pkg"


def test_the_core_path_becomes_the_plugins_module(plugin_package: str) -> None:
    become_plugin_module("alias_core_path", "verl", f"{plugin_package}.mod")
    assert sys.modules["alias_core_path"] is sys.modules[f"{plugin_package}.mod"]
    assert sys.modules["alias_core_path"].X == 1


@pytest.mark.parametrize(
    ("module", "says"),
    [
        ("alias_absent_pkg.mod", "alias_absent_pkg.mod, which is not installed: pip install 'rllm[verl]'."),
        (
            "alias_plugin_pkg.needy",
            "alias_plugin_pkg.needy, which needs alias_missing_dependency, which is not installed: pip install",
        ),
    ],
)
def test_a_missing_plugin_or_dependency_is_one_line(plugin_package: str, module: str, says: str) -> None:
    with pytest.raises(PluginLoadError) as error:
        become_plugin_module("alias_core_path", "verl", module)
    assert str(error.value).startswith("alias_core_path is the verl plugin's ") and says in str(error.value)
    assert "\n" not in str(error.value) and "alias_core_path" not in sys.modules


def test_a_switched_off_plugin_is_one_line(plugin_package: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLLM_DISABLED_PLUGINS", "other,verl")
    with pytest.raises(PluginLoadError, match="RLLM_DISABLED_PLUGINS switches that plugin off; remove verl"):
        become_plugin_module("alias_core_path", "verl", f"{plugin_package}.mod")
    assert f"{plugin_package}.mod" not in sys.modules
