"""Following the docs in order never has a run refused: each documented training run has a directory of its own.

Every ``rllm train`` example used to write to ``runs/rllm/default``, so the second one with
other settings was refused as a resume of the first.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUN_NAME_KEYS = ("rllm.trainer.experiment_name", "rllm.trainer.project_name", "rllm.trainer.output_dir")


def _commands(text: str) -> list[str]:
    """Each ``rllm train`` that trains, in code blocks and inline code (not --plot, -c RUN_DIR, error examples)."""
    joined = re.sub(r"\\\n\s*", " ", text)
    lines = joined.splitlines()
    found = []
    for number, line in enumerate(lines):
        following = lines[number + 1] if number + 1 < len(lines) else ""
        if following.startswith("rllm train: error"):
            continue  # an example of a refusal
        found += re.findall(r"(?:^|\$ |/|`)(rllm train(?: [^`#\n]*)?)", line)
    return [c.strip() for c in found if not re.search(r"--plot|--help| -c |\.yaml\b.*config", c)]


def _run_dir(words: list[str]) -> str:
    given = dict(word.split("=", 1) for word in words if word.startswith(RUN_NAME_KEYS))
    if "rllm.trainer.output_dir" in given:
        return given["rllm.trainer.output_dir"]
    project = given.get("rllm.trainer.project_name", "rllm")
    return f"runs/{project}/{given.get('rllm.trainer.experiment_name', 'default')}"


def test_documented_training_runs_with_other_settings_have_their_own_run_directory() -> None:
    settings: dict[str, set[tuple[str, ...]]] = defaultdict(set)
    where: dict[str, list[str]] = defaultdict(list)
    for page in PAGES:
        for command in _commands(page.read_text(encoding="utf-8")):
            words = command.split()[2:]
            run_dir = _run_dir(words)
            settings[run_dir].add(tuple(sorted(w for w in words if not w.startswith(RUN_NAME_KEYS))))
            where[run_dir].append(f"{page.name}: {command}")
    assert sum(map(len, where.values())) > 10  # the scan finds the documented runs
    shared = {run_dir: where[run_dir] for run_dir, seen in settings.items() if len(seen) > 1}
    assert not shared, shared
