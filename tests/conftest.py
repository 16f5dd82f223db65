"""Shared fixtures: a private plugin manager so tests that register things leave no trace."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rllm.plugins import manager as manager_module
from rllm.plugins.discovery import BUILTIN_PLUGIN
from rllm.plugins.manager import PluginManager
from rllm.plugins.registry import Source


@pytest.fixture
def plugin_manager(monkeypatch: pytest.MonkeyPatch) -> Iterator[PluginManager]:
    """A manager holding only the built-in plugin, installed as the process-wide one for the test."""
    from rllm_builtin import plugin as builtin_plugin

    fresh = PluginManager()
    fresh.register(builtin_plugin, Source("builtin", BUILTIN_PLUGIN, "rllm", "test"))
    monkeypatch.setattr(manager_module, "_manager", fresh)
    yield fresh
