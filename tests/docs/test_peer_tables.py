"""docs/estimators.md and docs/losses.md say, for every built-in name, which peers have it and what rllm matches."""

from __future__ import annotations

import re
from pathlib import Path

import rllm
from rllm.losses import loss_entry, loss_names

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _table(page: str, header: str) -> dict[str, list[str]]:
    """The rows of the table whose header line starts with ``header``: each name in a row's first cell -> its cells."""
    lines = (DOCS / page).read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows: dict[str, list[str]] = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        for name in re.findall(r"`([^`]+)`", cells[0]):
            rows[name] = cells
    return rows


def test_every_built_in_estimator_has_its_peers_and_its_exact_match() -> None:
    table = _table("estimators.md", "| name | peers that have it | matches exactly |")
    manager = rllm.get_plugin_manager()
    builtin = [
        name for name in manager.estimators.names() if manager.estimators.resolve(name).source.plugin == "builtin"
    ]
    assert len(builtin) > 20
    missing = [name for name in builtin if name not in table]
    assert not missing, f"docs/estimators.md's peers table lacks {missing}"
    assert all(cells[1] and cells[2] for cells in table.values())


def test_every_built_in_loss_has_its_source_peers_and_exact_match() -> None:
    table = _table("losses.md", "| name | aliases | what it computes | source | peers | matches exactly |")
    builtin = [
        name
        for name in loss_names()
        if loss_entry(name).alias_of is None and loss_entry(name).source.plugin == "builtin"
    ]
    assert len(builtin) > 10
    missing = [name for name in builtin if name not in table]
    assert not missing, f"docs/losses.md's built-in table lacks {missing}"
    assert all(len(cells) == 6 and cells[3] and cells[4] and cells[5] for cells in table.values())
