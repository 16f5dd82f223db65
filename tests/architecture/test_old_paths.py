"""Modules split or renamed by job keep their old import paths: each old path still gives the same objects."""

from __future__ import annotations

import importlib

import pytest

MOVED = [
    # (old module, name, new module)
    ("rllm.engine.rollout.openai_engine", "OpenAIEngine", "rllm.engine.rollout.openai_engine"),
    ("rllm.engine", "OpenAIEngine", "rllm.engine.rollout.openai_engine"),
]


@pytest.mark.parametrize(("old", "name", "new"), MOVED, ids=[f"{old}.{name}" for old, name, _ in MOVED])
def test_the_old_path_gives_the_moved_object(old: str, name: str, new: str) -> None:
    assert getattr(importlib.import_module(old), name) is getattr(importlib.import_module(new), name)


def test_the_openai_engine_keeps_its_server_methods() -> None:
    from rllm.engine.rollout.openai_engine import OpenAIEngine
    from rllm.engine.rollout.openai_servers import OpenAIServers

    assert issubclass(OpenAIEngine, OpenAIServers)
    for method in ("connect", "call", "server_for"):
        assert callable(getattr(OpenAIEngine, method))
