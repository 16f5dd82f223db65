"""A backend registered as ``"module:Class"`` is imported when a run selects it, and checked then.

So a plugin whose backend needs heavy packages (torch) registers it without importing them,
and a wrong path is one line naming the plugin, at the first run that selects it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import rllm
from rllm.config import load_config
from rllm.errors import PluginContractError
from rllm.plugins import PluginManager, Source
from rllm.trainer.components import resolve_backend

SOURCE = Source("plugin", "acme", "acme-rl", "2.1")
NAMED = "plugin 'acme', distribution acme-rl 2.1"
MODULE = "acme_lazy_backend_demo"


class LazyBackends:
    """Registers each ``(name, path)`` as a backend."""

    def __init__(self, **paths: str) -> None:
        self.paths = paths

    @rllm.hookimpl
    def rllm_register_backends(self, register: rllm.plugins.BackendRegistrar) -> None:
        for name, path in self.paths.items():
            register(name, path)


@pytest.fixture
def demo_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A module defining a backend class, importable but not imported."""
    (tmp_path / f"{MODULE}.py").write_text(
        "from rllm_builtin.embedded import EmbeddedBackend\n\n\nclass DemoBackend(EmbeddedBackend):\n    pass\n",
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, MODULE, raising=False)
    return MODULE


def test_a_path_is_imported_only_when_the_backend_is_selected(plugin_manager: PluginManager, demo_module: str) -> None:
    info = plugin_manager.register(LazyBackends(demo=f"{demo_module}:DemoBackend"), SOURCE)
    assert info.status == "ok" and info.backends == ["demo"]
    assert demo_module not in sys.modules  # registering imported nothing
    backend = resolve_backend(None, load_config(overrides=["rllm.backend=demo"]))
    assert backend is sys.modules[demo_module].DemoBackend


@pytest.mark.parametrize(
    ("path", "problem"),
    [
        (
            "acme_no_such_module:Backend",
            "cannot be loaded from 'acme_no_such_module:Backend': No module named 'acme_no_such_module'. "
            "Install what the plugin needs, or fix its registration.",
        ),
        ("json:NoSuchBackend", "cannot be loaded from 'json:NoSuchBackend': module 'json' has no attribute"),
        ("json:JSONDecoder", "loaded from 'json:JSONDecoder', does not implement rllm.trainer.backend_protocol"),
        ("json:dumps", "loaded from 'json:dumps', is <function dumps"),
    ],
    ids=["no-module", "no-attribute", "not-a-backend", "not-a-class"],
)
def test_a_wrong_path_is_one_line_naming_the_plugin(plugin_manager: PluginManager, path: str, problem: str) -> None:
    assert plugin_manager.register(LazyBackends(wrong=path), SOURCE).status == "ok"  # checked when selected
    with pytest.raises(PluginContractError) as caught:
        resolve_backend("wrong", load_config())
    message = str(caught.value)
    assert message.startswith(f"Backend 'wrong' of {NAMED}") and problem in message
    assert "\n" not in message


def test_a_string_that_is_no_path_is_refused_when_registered(plugin_manager: PluginManager) -> None:
    with pytest.warns(rllm.PluginWarning, match="rllm plugin 'acme'"):
        info = plugin_manager.register(LazyBackends(wrong="acme.backend.Backend"), SOURCE)
    assert info.status == "failed" and info.backends == []
    assert "registered backend 'wrong', which is 'acme.backend.Backend', not a class" in str(
        plugin_manager.failures[-1]
    )


def test_every_door_that_selects_a_backend_loads_the_path(
    plugin_manager: PluginManager, demo_module: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``rllm train``, ``UnifiedTrainer("name")`` and ``rllm.testing.check_backend`` import the path alike."""
    from rllm.cli.main import main
    from rllm.testing import check_backend
    from rllm.trainer import UnifiedTrainer

    plugin_manager.register(LazyBackends(demo=f"{demo_module}:DemoBackend", wrong="acme_no_such_module:B"), SOURCE)
    trainer = UnifiedTrainer("demo", load_config(), progress=False)
    trainer.shutdown()
    assert type(trainer.backend) is sys.modules[demo_module].DemoBackend
    check_backend("demo", tmp_path / "check")
    run = [f"rllm.trainer.output_dir={tmp_path / 'run'}", "rllm.trainer.total_batches=1", "rllm.trainer.test_freq=0"]
    assert main(["train", "--no-progress", *run, "rllm.backend=demo"]) == 0
    capsys.readouterr()
    assert main(["train", "--no-progress", *run, "rllm.backend=wrong"]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(
        f"rllm train: error: Backend 'wrong' of {NAMED} cannot be loaded from 'acme_no_such_module:B'"
    )
