"""The declarations floor: domain modules read their words from ``rllm.contract``, never from the plugin layer.

import-linter's layers ignore imports under ``TYPE_CHECKING``; these tests read every import
statement, those included, so a typing-only circle or a vocabulary import from the hook
specifications fails here.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "core" / "rllm"
HOOKSPECS = "rllm.plugins.hookspecs"
HOOK_MODULES = {HOOKSPECS, *(f"rllm.plugins.{family}_hooks" for family in ("advantage", "training", "config"))}
"""The hook specifications: the reference module and the modules of each hook family it re-exports."""


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports, ``from rllm.plugins import hookspecs`` counted as ``rllm.plugins.hookspecs``."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def module_name(path: Path) -> str:
    parts = path.relative_to(CORE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def sources() -> list[Path]:
    return sorted([*CORE.rglob("*.py"), *(ROOT / "plugins").glob("*/*/**/*.py")])


def test_only_the_plugin_system_imports_the_hook_specifications() -> None:
    outside = [
        str(path.relative_to(ROOT))
        for path in sources()
        if not path.is_relative_to(CORE / "plugins") and HOOK_MODULES & imported_modules(path)
    ]
    assert not outside, f"import their words from rllm.contract, not the hook specifications: {outside}"


def test_the_floor_imports_nothing_of_rllm_but_errors() -> None:
    floor = sorted((CORE / "contract").glob("*.py"))
    assert floor, "rllm.contract is missing"
    for path in floor:
        rllm_imports = {m for m in imported_modules(path) if m.split(".")[0] == "rllm"}
        above = {m for m in rllm_imports if not m.startswith(("rllm.contract", "rllm.errors"))}
        assert not above, f"{module_name(path)} imports {sorted(above)}"


def test_the_plugin_system_never_imports_the_configuration_even_for_typing() -> None:
    """``config`` sits above ``plugins``; a typing-only import back would be a circle the linter cannot see."""
    circle = {
        module_name(path): sorted(m for m in imported_modules(path) if m.startswith("rllm.config"))
        for path in sorted((CORE / "plugins").glob("*.py"))
    }
    assert not {name: mods for name, mods in circle.items() if mods}
