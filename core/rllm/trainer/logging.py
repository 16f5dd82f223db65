"""Where metrics and episodes go: the ``console`` and ``jsonl`` trackers, per-step episode files.

Files are written atomically (a temporary file in the same directory, then ``os.replace``),
so a process killed at any moment leaves either the old file or the new one, never half.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import re
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from enum import Enum
from pathlib import Path
from typing import Any, TextIO

from rllm.errors import RunDirError
from rllm.io import write_atomic
from rllm.trainer.rundir import os_cause
from rllm.trainer.trackers import Tracker, TrackerRun
from rllm.types import Episode

METRICS_FILE = "metrics.jsonl"
_RESUME_HINT = "the last checkpoint is intact: free space or fix permissions, then run the same command again to resume"


def write_failure(path: Path, exc: OSError) -> RunDirError:
    """A one-line error for a run file that cannot be written (full disk, permissions)."""
    exc = os_cause(exc)
    return RunDirError(f"Cannot write {str(path)!r}: {exc.strerror or exc}; {_RESUME_HINT}.")


def _jsonable(value: Any) -> Any:
    """Episode fields as JSON: enums by value, numpy scalars as numbers, the rest as text."""
    if isinstance(value, Enum):
        return value.value
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The records of a metrics file; a torn last line (a killed writer) is ignored.

    ``json`` per line rather than the jsonlines package (not a dependency): the reading rllm needs is that
    loop plus skipping a torn line and naming any other bad one.
    """
    if not path.is_file():
        return []
    records = []
    for number, raw in enumerate(path.read_bytes().splitlines(), start=1):
        try:
            record = json.loads(raw)
        except json.JSONDecodeError:
            continue
        except (UnicodeDecodeError, RecursionError):
            record = None
        if not isinstance(record, dict) or not _is_step(record.get("step", 0)):
            raise RunDirError(
                f"{str(path)!r}, line {number}: not a metrics record rllm wrote (a JSON object with an integer "
                "'step'); fix or delete that line, or move the file away to start its metrics afresh."
            )
        records.append(record)
    return records


def _is_step(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class ProgressBar:
    """A one-line text progress bar on stderr; on a non-terminal it prints every tenth of the run.

    Hand-written because tqdm is not among rllm's four dependencies, and this is all of the bar rllm uses.
    """

    def __init__(self, total: int, stream: TextIO | None = None, width: int = 28) -> None:
        self.total = max(total, 1)
        self.stream = stream or sys.stderr
        self.width = width
        self.started = time.monotonic()
        self.start_step: int | None = None
        self.interactive = self.stream.isatty()
        self._last_decile = -1

    def update(self, step: int, note: str = "") -> None:
        if self.start_step is None:
            self.start_step = step - 1
        done = min(step / self.total, 1.0)
        filled = int(done * self.width)
        elapsed = time.monotonic() - self.started
        rate = (step - self.start_step) / elapsed if elapsed > 0 else 0.0
        eta = (self.total - step) / rate if rate > 0 else 0.0
        line = (
            f"[{'#' * filled}{'.' * (self.width - filled)}] {step}/{self.total} "
            f"{elapsed:5.1f}s elapsed, ~{eta:4.1f}s left {note}"
        )
        if self.interactive:
            self.stream.write("\r\x1b[K" + line)
            if step >= self.total:
                self.stream.write("\n")
        else:
            decile = int(done * 10)
            if decile == self._last_decile and step < self.total:
                return
            self._last_decile = decile
            self.stream.write(line + "\n")
        self.stream.flush()

    def clear(self) -> None:
        """Erase the bar so a console line can be printed cleanly."""
        if self.interactive:
            self.stream.write("\r\x1b[K")
            self.stream.flush()


CONSOLE_KEYS = ("reward/", "advantage/", "actor/loss", "actor/entropy", "time/step")


class ConsoleTracker(Tracker):
    """The ``console`` tracker: a compact line per step on stdout (rewards, advantages, loss), every validation
    metric, and a progress bar on stderr."""

    def __init__(self, run: TrackerRun, stream: TextIO | None = None) -> None:
        super().__init__(run)
        self.progress: ProgressBar | None = None
        self.stream = stream or sys.stdout

    def start(self, total_steps: int) -> None:
        self.progress = ProgressBar(total_steps) if self.run.progress else None

    def log_metrics(self, metrics: Mapping[str, Any], step: int, kind: str) -> None:
        if self.progress is not None:
            self.progress.clear()
        shown = []
        for key, value in metrics.items():
            if key in ("epoch", "wall_time"):
                continue
            if kind == "train" and not key.startswith(CONSOLE_KEYS):
                continue
            if kind == "train" and key.startswith("advantage/") and not key.endswith("/std"):
                continue
            if kind == "train" and key.startswith("reward/") and not key.endswith("/mean"):
                continue
            number = _number(value)
            if number is not None:
                shown.append(f"{key}={number:.4g}")
        print(f"[{kind} step {step}] " + " ".join(shown), file=self.stream, flush=True)
        if self.progress is not None and kind == "train":
            reward = next((v for k, v in metrics.items() if k.startswith("reward/") and k.endswith("/mean")), None)
            self.progress.update(step, f"reward {reward:.3f}" if reward is not None else "")


class JsonlTracker(Tracker):
    """The ``jsonl`` tracker: one JSON object per record appended to ``metrics.jsonl``, flushed at every line.

    Hand-written on purpose: the file is the run's own record (resuming cuts it back to the checkpoint),
    and ``json`` with one write per line is all a JSON Lines writer is.
    """

    def __init__(self, run: TrackerRun) -> None:
        super().__init__(run)
        self.path = run.output_dir / METRICS_FILE
        self.handle: TextIO | None = None

    def outputs(self) -> list[Path]:
        return [self.path]

    def start(self, total_steps: int) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.handle = self.path.open("a", encoding="utf-8")
        except OSError as exc:
            raise write_failure(self.path, exc) from exc

    def log_metrics(self, metrics: Mapping[str, Any], step: int, kind: str) -> None:
        record = {"kind": kind, "step": step, **metrics}
        clean = {k: v if isinstance(v, str | int) else _number(v) for k, v in record.items()}
        if self.handle is None:
            return
        try:
            self.handle.write(json.dumps(clean) + "\n")
            self.handle.flush()
        except OSError as exc:
            raise write_failure(self.path, exc) from exc

    def close(self) -> None:
        """Close the file; a line a full disk refused is already reported, so a failing flush is not raised again."""
        if self.handle is not None:
            with contextlib.suppress(OSError):
                self.handle.close()
            self.handle = None


def truncate_metrics(path: Path, last_step: int) -> None:
    """Drop records of steps after ``last_step``: those a resumed run is about to train again."""
    records = read_metrics(path)
    kept = [r for r in records if int(r.get("step", 0)) <= last_step]
    try:
        write_atomic(path, "".join(json.dumps(r) + "\n" for r in kept))
    except OSError as exc:
        raise write_failure(path, exc) from exc


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
