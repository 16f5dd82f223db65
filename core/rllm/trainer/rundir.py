"""A run directory has one owner, and rllm deletes only what it wrote there.

``rllm.trainer.output_dir`` is locked with ``fcntl.flock`` on ``.rllm.lock`` for the whole
run, so a second process training into it stops at once, naming the holder's pid, instead of
deleting the first one's metrics and checkpoints. The lock goes with the process, so a
killed run never leaves a stale lock behind. ``fcntl.flock`` itself rather than the filelock
package: that is not among the core's dependencies, and one non-blocking ``flock`` is all it would do here.

``.rllm-run.json`` records the names rllm writes in the directory (``metrics.jsonl``,
``checkpoints``, ...). A run refuses a directory where one of those names exists without
that record, i.e. a file rllm did not write: it neither appends to it nor deletes it.

rllm makes no symbolic links there, so a link at one of its names (or inside its folders) was
planted: the run is refused, naming it, before anything is written through it to a file
outside the run. A tracker's folder is the tracker library's inside (wandb links its latest run
there): only the folder itself must not be a link.
"""

from __future__ import annotations

import fcntl
import glob
import json
import os
from collections.abc import Sequence
from pathlib import Path

from rllm.errors import RunDirError, RunDirLockedError
from rllm.io import os_cause, write_atomic

LOCK_FILE = ".rllm.lock"
OWNED_FILE = ".rllm-run.json"
FORMAT = "rllm-run"
_PID_WIDTH = 24


def _failure(what: str, exc: OSError) -> RunDirError:
    exc = os_cause(exc)
    return RunDirError(f"Cannot {what}: {exc.strerror or exc}{f' ({exc.filename})' if exc.filename else ''}.")


class RunDirectory:
    """The lock and the record of rllm's names in one run directory.

    ``names`` are the entries (relative to ``path``, first component only) rllm writes there;
    ``libraries`` those among them whose inside a tracker's library writes (not searched for links).
    """

    def __init__(self, path: Path, names: Sequence[str], libraries: Sequence[str] = ()) -> None:
        self.path = Path(path)
        self.names = sorted(set(names) | set(libraries))
        self.libraries = set(libraries)
        self._lock_fd: int | None = None

    def acquire(self) -> None:
        """Lock the directory for this process, or raise :class:`RunDirLockedError` naming the holder.

        A directory holding files rllm did not write is refused first, before the lock file is made.
        """
        self._owned()
        lock_path = self.path / LOCK_FILE
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise _failure(f"create the run directory {str(self.path)!r}", exc) from exc
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise _failure(f"open the lock file {str(lock_path)!r}", exc) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, _PID_WIDTH).decode("ascii", "replace").strip()
            os.close(fd)
            raise RunDirLockedError(
                f"Run directory {str(self.path)!r} is in use by another rllm run (pid {holder or 'unknown'}); "
                "wait for it to finish, or choose another rllm.trainer.experiment_name or output_dir."
            ) from None
        try:  # a fixed-width record rewritten in place: no new block, so it works on a full disk too
            os.pwrite(fd, f"{os.getpid()}\n".ljust(_PID_WIDTH).encode(), 0)
        except OSError as exc:
            os.close(fd)
            raise _failure(f"write the lock file {str(lock_path)!r}", exc) from exc
        self._lock_fd = fd

    def release(self) -> None:
        """Give the directory up (also happens when the process ends, however it ends)."""
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _links(self) -> list[Path]:
        """Symbolic links among rllm's entries (its names, their contents, the lock and the record)."""
        found = []
        for name in [*self.names, LOCK_FILE, OWNED_FILE]:
            top = self.path / name
            if top.is_symlink():
                found.append(top)
            elif top.is_dir() and name not in self.libraries:
                for folder, dirs, files in os.walk(top):  # os.walk does not descend into linked folders
                    found += [Path(folder, entry) for entry in [*dirs, *files] if Path(folder, entry).is_symlink()]
        return found

    def _owned(self) -> list[str]:
        """The names recorded as rllm's; raises :class:`RunDirError` if one of ``names`` exists unrecorded.

        A symbolic link among them is refused too: rllm never writes through a link it did not make.
        """
        links = self._links()
        if links:
            raise RunDirError(
                f"Run directory {str(self.path)!r} holds the symbolic link {str(links[0])!r} -> "
                f"{os.readlink(links[0])!r}, which rllm did not make; rllm never writes through links in a run "
                "directory. Remove the link (or put the real file there), or choose another rllm.trainer.output_dir."
            )
        record = self.path / OWNED_FILE
        owned: list[str] = []
        if record.is_file():
            try:
                data = json.loads(record.read_bytes())
                owned = [str(name) for name in data["names"]] if data.get("format") == FORMAT else []
            except (OSError, ValueError, KeyError, TypeError, AttributeError):
                owned = []
        foreign = [name for name in self.names if name not in owned and os.path.lexists(self.path / name)]
        if foreign:
            listed = ", ".join(repr(name) for name in foreign)
            raise RunDirError(
                f"Run directory {str(self.path)!r} already holds {listed}, which rllm did not write (no record in "
                f"{OWNED_FILE}); rllm neither overwrites nor deletes such files. Move them away, or choose another "
                "rllm.trainer.output_dir (or experiment_name)."
            )
        return owned

    def recorded(self) -> list[str]:
        """The names the record holds as rllm's (checked as :meth:`acquire` checks them)."""
        return self._owned()

    def claim(self) -> None:
        """Record ``names`` as rllm's (the lock held), refusing if one exists that rllm did not write."""
        owned = self._owned()
        record = self.path / OWNED_FILE
        try:
            for name in [*self.names, OWNED_FILE]:  # unfinished atomic writes of a killed run
                for scratch in self.path.glob(f".{glob.escape(name)}.*.tmp"):
                    scratch.unlink(missing_ok=True)
            if set(self.names) - set(owned):
                write_atomic(record, json.dumps({"format": FORMAT, "names": sorted(set(owned) | set(self.names))}))
        except OSError as exc:
            raise _failure(f"claim the run directory {str(self.path)!r}", exc) from exc
