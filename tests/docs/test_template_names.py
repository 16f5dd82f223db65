"""The docs' plugin templates register names of their own: copying one beside the example plugin clashes with nothing.

README's template estimator was ``median_baseline``, the example plugin's estimator of the same name.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REGISTERED = re.compile(r"""register\(\s*(?:name=)?["']([\w.+-]+)["']""")


def _registered(text: str) -> set[str]:
    return set(REGISTERED.findall(text))


def test_the_templates_in_the_docs_do_not_reuse_the_example_plugins_names() -> None:
    example = set().union(*(_registered(p.read_text()) for p in (ROOT / "plugins" / "example").rglob("*.py")))
    assert {"median_baseline", "rank", "by_task_only", "bandit"} <= example  # the scan reads the example plugin
    for page in [ROOT / "README.md", ROOT / "docs" / "plugins.md"]:
        templates = _registered(page.read_text(encoding="utf-8"))
        assert templates, page.name
        assert not templates & example, (page.name, sorted(templates & example))
