"""The rollout file ``rllm advantages`` reads twice, and the progress line it shows meanwhile.

The command reads its input once to check it and once to write it back, so the input must
be re-readable: a regular file is opened twice, the bundled sample comes from the package,
and stdin or a FIFO is first copied to an anonymous temporary file.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import IO, cast

from rllm.errors import RolloutFileError

SAMPLE = "sample_rollouts.jsonl"


class Progress:
    """A one-line progress report on stderr, only when stderr is a terminal.

    Hand-written (tqdm is not a dependency); it reports bytes by pass, which the trainer's step-counting
    ``rllm.trainer.logging.ProgressBar`` does not.
    """

    def __init__(self, total: int | None, stream: IO[str] | None = None) -> None:
        self.total, self.stream = total, stream or sys.stderr
        self.enabled = self.stream.isatty()
        self._shown = 0.0
        self._stage = ""

    def update(self, stage: str, done: int) -> None:
        now = time.monotonic()
        if not self.enabled or (stage == self._stage and now - self._shown < 0.2):
            return
        self._shown, self._stage = now, stage
        share = f" {100 * done / self.total:3.0f}%" if self.total else ""
        self.stream.write(f"\rrllm advantages: {stage}{share} ({done / 1e6:.1f} MB)")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self._shown:
            self.stream.write("\r\033[K")
            self.stream.flush()


@dataclass
class Input:
    """A re-readable input: the file itself, the bundled sample, or a temporary copy of stdin or a FIFO.

    The copy has no name in the file system (it is unlinked as it is made), so no kill, not
    even SIGKILL, can leave it behind in the temporary folder.
    """

    path: Path | None
    source: str
    copy: IO[bytes] | None = None

    def open(self) -> IO[bytes]:
        if self.copy is not None:
            self.copy.flush()
            handle = os.fdopen(os.dup(self.copy.fileno()), "rb")
            handle.seek(0)
            return handle
        if self.path is None:
            return resources.files("rllm.data").joinpath(SAMPLE).open("rb")
        try:
            return self.path.open("rb")
        except OSError as exc:
            raise RolloutFileError(f"Rollout file {self.source!r} cannot be read: {exc.strerror}.") from None

    def size(self) -> int | None:
        return None if self.path is None or self.copy is not None else self.path.stat().st_size

    def remove_copy(self) -> None:
        if self.copy is not None:
            self.copy.close()


def _input(word: str | None) -> Input:
    if word is None:
        return Input(None, SAMPLE)
    if word == "-":
        return _spool(sys.stdin.buffer, "<stdin>")
    path = Path(word)
    if not path.exists():
        raise RolloutFileError(f"Rollout file {word!r} does not exist.")
    if path.is_dir():
        raise RolloutFileError(f"Rollout file {word!r} is a folder; give a .jsonl file.")
    if not path.is_file():  # a FIFO or device can be read once only
        with Input(path, word).open() as handle:
            return _spool(handle, word)
    return Input(path, word)


def _spool(handle: IO[bytes], source: str) -> Input:
    """Copy a stream that cannot be read twice into an anonymous temporary file."""
    spool = tempfile.TemporaryFile(prefix="rllm-advantages-", suffix=".jsonl")  # noqa: SIM115 (kept open)
    try:
        read = getattr(handle, "read1", handle.read)  # what has arrived, not a full buffer's worth
        while chunk := read(1 << 16):
            spool.write(chunk)
    except BaseException:
        spool.close()
        raise
    return Input(None, source, copy=cast(IO[bytes], spool))
