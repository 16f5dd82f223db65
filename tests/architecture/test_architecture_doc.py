"""docs/architecture.md describes every package as it is: its layer table and plugin table follow the tree.

A package or module added under ``core/rllm``, a layer added to ``pyproject.toml`` or a plugin
added under ``plugins/`` without a row fails here, as does a row naming one that is gone.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "core" / "rllm"
GUIDE = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")


def table(header: str) -> list[list[str]]:
    """The cells of the markdown table whose header row starts with ``header``, one list per row."""
    lines = GUIDE.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def named(cell: str) -> list[str]:
    """The modules a cell names: ``cli/`` and ``types.py`` as ``cli`` and ``types``."""
    return [name.rstrip("/").removesuffix(".py") for name in re.findall(r"`([^`]+)`", cell)]


def layer_rows() -> list[list[str]]:
    return [named(row[1]) for row in table("| layer | modules |")]


def test_every_package_and_module_of_core_has_a_layer_row() -> None:
    tree = {path.parent.name for path in CORE.glob("*/__init__.py")}
    tree |= {path.stem for path in CORE.glob("*.py") if path.stem != "__init__"}
    documented = {name for row in layer_rows() for name in row}
    assert sorted(tree - documented) == [], "packages or modules of core/rllm missing from docs/architecture.md"
    assert sorted(documented - tree) == [], "rows of docs/architecture.md naming what core/rllm no longer has"


def test_the_layer_rows_follow_the_import_linter_layers() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contract = next(c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers")
    level = {name.strip(): i for i, layer in enumerate(contract["layers"]) for name in layer.split("|")}
    rows = layer_rows()
    assert {name for row in rows for name in row} == set(level), "the table and pyproject.toml name other layers"
    levels = [level[name] for row in rows for name in row]
    assert levels == sorted(levels), f"the table's rows are not in the layers' order: {rows}"
    for row in rows:
        assert len({level[name] for name in row}) == 1, f"one row holds two layers: {row}"


def test_every_plugin_under_plugins_has_a_row() -> None:
    shipped = {path.parent.name for path in (ROOT / "plugins").glob("*/*/__init__.py")}
    documented = {named(row[0])[0] for row in table("| package | entry point |")}
    assert shipped and sorted(shipped - documented) == [], "plugins missing from docs/architecture.md"
    assert sorted(documented - shipped) == []
