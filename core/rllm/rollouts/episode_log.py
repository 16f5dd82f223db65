"""The episode log: every episode the workflow engine returns, one JSON line each, in a file per step and call."""

from __future__ import annotations

import dataclasses
import json
import re
from collections import Counter
from collections.abc import Sequence
from enum import Enum
from pathlib import Path
from typing import Any

from rllm.io import write_atomic, write_failure
from rllm.types import Episode

__all__ = ["EpisodeLogger"]


def _jsonable(value: Any) -> Any:
    """Episode fields as JSON: enums by value, numpy scalars as numbers, the rest as text."""
    if isinstance(value, Enum):
        return value.value
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


class EpisodeLogger:
    """Writes episodes to ``{base_dir}/{mode}/step_{step:06d}-{part:03d}.jsonl``, each file atomically.

    ``part`` counts the engine calls of one step (validation runs one per batch), so no call
    overwrites another's file; a resumed run that repeats a step replaces that step's files.
    """

    MODES = ("train", "val")
    _LOG = re.compile(r"^step_\d{6}-\d{3}\.jsonl$")
    _SCRATCH = re.compile(r"^\.step_\d{6}-\d{3}\.jsonl\..+\.tmp$")
    """The temporary file of a write that a killed run left unfinished."""

    def __init__(self, base_dir: Path) -> None:
        self.base_dir = Path(base_dir)
        self._parts: Counter[tuple[str, int]] = Counter()

    def discard(self, logs: bool = True) -> None:
        """Delete unfinished writes and, with ``logs``, the episode files (and folders left empty); other files stay."""
        for mode in self.MODES:
            folder = self.base_dir / mode
            if not folder.is_dir():
                continue
            for child in folder.iterdir():
                if (self._SCRATCH.match(child.name) or (logs and self._LOG.match(child.name))) and child.is_file():
                    child.unlink()
            if not any(folder.iterdir()):
                folder.rmdir()
        if self.base_dir.is_dir() and not any(self.base_dir.iterdir()):
            self.base_dir.rmdir()

    def log(self, episodes: Sequence[Episode], step: int, mode: str) -> Path:
        part = self._parts[(mode, step)]
        self._parts[(mode, step)] += 1
        path = self.base_dir / mode / f"step_{step:06d}-{part:03d}.jsonl"
        lines = [json.dumps(dataclasses.asdict(ep), default=_jsonable) + "\n" for ep in episodes]
        try:
            write_atomic(path, "".join(lines))
        except OSError as exc:
            raise write_failure(path, exc) from exc
        return path
