"""Where metrics and episodes go: the ``console`` and ``jsonl`` trackers, per-step episode files.

Files are written atomically (a temporary file in the same directory, then ``os.replace``),
so a process killed at any moment leaves either the old file or the new one, never half.
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from rllm.errors import RunDirError
from rllm.io import write_atomic, write_failure
from rllm.trainer.trackers import Tracker, TrackerRun

METRICS_FILE = "metrics.jsonl"


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
