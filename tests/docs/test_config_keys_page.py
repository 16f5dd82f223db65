"""docs/config-keys.md fits a 1920 px screen: no table's columns need more than a screen's width of text.

A column is at least as wide as its longest unbreakable word (code spans do not wrap); the one
table of every key needed 189 characters of such words (about 1,600 px in code font, plus each
cell's padding and the page's margins). The page now has a table per section, and long defaults
are cut into spans a browser may wrap between.
"""

from __future__ import annotations

import re
from pathlib import Path

PAGE = Path(__file__).resolve().parents[2] / "docs" / "config-keys.md"
BUDGET = 120
"""Characters of unbreakable text across a table's columns: about 1,000 px of code font, room for the margins."""


def _tables(text: str) -> list[list[list[str]]]:
    tables, current = [], []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|") and not line.startswith("|---"):
            current.append([cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]])
        elif not line.startswith("|---") and current:
            tables.append(current)
            current = []
    return tables


def test_every_table_of_the_config_keys_page_fits_the_screen() -> None:
    tables = _tables(PAGE.read_text(encoding="utf-8"))
    assert sum(len(table) - 1 for table in tables) > 80  # every key is on the page
    for table in tables:
        columns = zip(*table, strict=True)
        widths = [max(max((len(word) for word in cell.split()), default=0) for cell in column) for column in columns]
        assert sum(widths) <= BUDGET, (table[1][0], widths)
