"""Writing output files the way users expect, and never leaving half of one behind.

:func:`open_output` is the one place that decides how: ``-`` (or None) is standard output;
an existing FIFO, device or other non-regular file is streamed to, as ``cat > path`` would;
a symlink's target is written and the link kept; a regular file (or a new one) is written
to a temporary file beside it and renamed over it, keeping the old file's permissions, so
readers see the old content or the new, never a mix. The temporary file is removed on any
error and on SIGTERM/SIGHUP, and write failures (full disk, permissions) become a one-line
:class:`~rllm.errors.OutputFileError` naming the path.
"""

from __future__ import annotations

import os
import signal
import stat
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from enum import Enum
from pathlib import Path
from types import FrameType
from typing import Any, BinaryIO

from rllm.errors import DataError, OutputFileError, RunDirError

_CLEANUP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


class Output:
    """A binary sink whose write failures are :class:`OutputFileError` naming the target."""

    def __init__(self, handle: BinaryIO, name: str, atomic: bool) -> None:
        self._handle = handle
        self.name = name
        self.atomic = atomic

    def write(self, data: bytes) -> None:
        try:
            self._handle.write(data)
        except BrokenPipeError:  # the reader went away (`| head`): the command stops quietly
            raise
        except OSError as exc:
            raise self.error(exc) from None

    def flush(self) -> None:
        try:
            self._handle.flush()
        except BrokenPipeError:  # the reader went away (`| head`): the command stops quietly
            raise
        except OSError as exc:
            raise self.error(exc) from None

    def error(self, exc: OSError) -> OutputFileError:
        kept = "; any previous content is unchanged" if self.atomic else ""
        return OutputFileError(f"Could not write {self.name}: {exc.strerror or exc}{kept}.")


def _cannot(name: str, exc: OSError) -> OutputFileError:
    """Why the output cannot even be opened, in one line."""
    if isinstance(exc, NotADirectoryError | FileExistsError):
        return OutputFileError(f"Cannot write {name}: a part of the path is a file, not a folder.")
    return OutputFileError(f"Cannot write {name}: {exc.strerror or exc}.")


@contextmanager
def exit_on_signals() -> Iterator[None]:
    """Turn SIGTERM/SIGHUP into SystemExit while the block runs, so ``finally`` clauses clean up."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    saved = {sig: signal.signal(sig, handler) for sig in _CLEANUP_SIGNALS}
    try:
        yield
    finally:
        for sig, previous in saved.items():
            signal.signal(sig, previous)


def _new_file_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


@contextmanager
def open_output(target: str | Path | None) -> Iterator[Output]:
    """A sink for ``target`` (see the module docstring); the content is committed when the block ends."""
    if target is None or str(target) == "-":
        out = Output(sys.stdout.buffer, "standard output", atomic=False)
        yield out
        out.flush()
        return
    path = Path(os.path.realpath(target))  # a symlink's target is what gets written
    name = repr(str(target))
    try:
        info = path.stat()
    except FileNotFoundError:
        info = None
    except OSError as exc:
        raise _cannot(name, exc) from None
    if info is not None and stat.S_ISDIR(info.st_mode):
        raise OutputFileError(f"Cannot write {name}: it is a folder; give a file name.")
    if info is not None and not stat.S_ISREG(info.st_mode):
        yield from _stream(path, name)
        return
    yield from _replace(path, name, None if info is None else stat.S_IMODE(info.st_mode))


def _stream(path: Path, name: str) -> Iterator[Output]:
    try:
        handle = path.open("wb")
    except OSError as exc:
        raise _cannot(name, exc) from None
    out = Output(handle, name, atomic=False)  # type: ignore[arg-type]
    try:
        yield out
        out.flush()
    except BaseException:
        with suppress(OSError):  # the data still buffered cannot be written either
            handle.close()
        raise
    try:
        handle.close()
    except OSError as exc:
        raise out.error(exc) from None


def _replace(path: Path, name: str, mode: int | None) -> Iterator[Output]:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise _cannot(name, exc) from None
    with exit_on_signals():
        try:
            handle = os.fdopen(fd, "wb")
            out = Output(handle, name, atomic=True)  # type: ignore[arg-type]
            try:
                yield out
                out.flush()
                try:
                    os.fchmod(handle.fileno(), _new_file_mode() if mode is None else mode)
                    os.fsync(handle.fileno())
                except OSError as exc:
                    raise out.error(exc) from None
            finally:
                with suppress(OSError):  # flushed above unless an error is already on its way
                    handle.close()
            try:
                os.replace(tmp, path)
            except OSError as exc:
                raise out.error(exc) from None
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` as :func:`open_output` does (a regular file is replaced atomically).

    rllm's own rather than the atomicwrites package (archived by its author, and no dependency): a temporary
    file and ``os.replace`` are the whole technique, and :func:`open_output` adds FIFOs, links and signals.
    """
    with open_output(path) as out:
        out.write(text.encode("utf-8"))


def jsonable(value: Any, where: str) -> Any:
    """``value`` in JSON types (tuples and arrays as lists, enums as values); else a DataError naming ``where``.

    What rllm writes as JSON (episodes, trajectories, steps) goes through it, so a value with no
    JSON form is refused naming where it sits, before any file is written.
    """
    if isinstance(value, Enum):
        return jsonable(value.value, where)
    if value is None or isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise DataError(f"{where} has a non-string key {key!r}; JSON objects need string keys.")
            out[key] = jsonable(item, f"{where}[{key!r}]")
        return out
    if isinstance(value, list | tuple):
        return [jsonable(item, f"{where}[{i}]") for i, item in enumerate(value)]
    tolist = getattr(value, "tolist", None)  # numpy arrays and scalars
    if callable(tolist):
        return jsonable(tolist(), where)
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):
        return jsonable(to_dict(), where)
    raise DataError(
        f"{where} holds a value of type {type(value).__name__}, which has no JSON form; store plain data (or an object "
        "with to_dict()) there."
    )


def os_cause(exc: OSError) -> OSError:
    """The operating system's error behind ``exc``: :func:`write_atomic` wraps it in an :class:`OutputFileError`."""
    inner = exc.__context__
    return inner if isinstance(exc, OutputFileError) and isinstance(inner, OSError) else exc


def write_failure(path: Path, exc: OSError) -> RunDirError:
    """A one-line error for a run file that cannot be written (full disk, permissions)."""
    exc = os_cause(exc)
    return RunDirError(
        f"Cannot write {str(path)!r}: {exc.strerror or exc}; the last checkpoint is intact: free space or fix "
        "permissions, then run the same command again to resume."
    )
