"""Each public name of a package face is written once, and hook kinds are found by name, never by position."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FACES = {
    "rllm": ROOT / "core" / "rllm" / "__init__.py",
    "rllm.plugins": ROOT / "core" / "rllm" / "plugins" / "__init__.py",
}


@pytest.mark.parametrize("face", sorted(FACES))
def test_a_public_name_is_written_once_an_import_never_a_string(face: str) -> None:
    package = importlib.import_module(face)
    tree = ast.parse(FACES[face].read_text(encoding="utf-8"))
    strings = [node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)]
    repeated = sorted(name for name in package.__all__ if name in strings and name != "__version__")
    assert not repeated, f"{face} lists these names as strings besides importing them: {repeated}"
    imported = [
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    ]
    assert sorted(name for name in imported if name in package.__all__) == sorted(package.__all__)
    for name in package.__all__:  # each resolves, lazily, to the object its module defines
        assert getattr(package, name) is not None


def test_rllm_exports_what_users_and_plugins_import() -> None:
    import rllm

    for name in ("compute_advantages", "AlgorithmConfig", "hookimpl", "Episode", "ConfigError", "__version__"):
        assert name in rllm.__all__
    assert rllm.hookimpl is importlib.import_module("rllm.plugins.hookspecs").hookimpl
    with pytest.raises(AttributeError, match="module 'rllm' has no attribute 'nonesuch'"):
        rllm.nonesuch  # noqa: B018


def test_hook_kinds_are_looked_up_by_name_never_by_position() -> None:
    by_position = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for path in sorted(
            [*(ROOT / "core").rglob("*.py"), *(ROOT / "plugins").rglob("*.py"), *(ROOT / "tests").rglob("*.py")]
        )
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "HOOK_KINDS"
    ]
    assert not by_position, f"use HOOK_KIND[attribute] instead of HOOK_KINDS[index]: {by_position}"
