"""Standard output that fails (a full device, a closed pipe) ends a command with one line, not a traceback.

Without this, Python reports a failed final flush as "Exception ignored ..." and exits 120.
Every command-line door (``rllm``, ``python -m rllm_transformers.warm_start``) goes through here.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
from contextlib import suppress
from typing import TextIO

STDOUT_ERRNOS = (errno.ENOSPC, errno.EIO, errno.EFBIG, getattr(errno, "EDQUOT", errno.ENOSPC))
"""Write failures of a terminal or redirected standard output (files rllm writes raise OutputFileError)."""


class Parser(argparse.ArgumentParser):
    """argparse, except that --help or --version on a full device is an error, not lost output and exit 0."""

    def _print_message(self, message: str, file: TextIO | None = None) -> None:
        if message:
            (file or sys.stderr).write(message)


def silence_stdout() -> None:
    """Point standard output at the null device, so the interpreter's final flush cannot fail again."""
    with suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def stdout_failed(command: str, exc: OSError) -> int:
    """The exit code for a failed write to standard output: a closed pipe is quiet, a full device one line."""
    if exc.errno != errno.EPIPE and exc.errno not in STDOUT_ERRNOS:
        raise exc
    silence_stdout()
    if exc.errno == errno.EPIPE:  # output piped into `head`: stop quietly, as unix tools do
        return 0
    print(f"{command}: error: Could not write standard output: {exc.strerror}.", file=sys.stderr)
    return 1


def flushed(command: str, code: int) -> int:
    """``code`` once standard output is flushed; a failed flush is reported here, as :func:`stdout_failed` says."""
    try:
        sys.stdout.flush()
    except OSError as exc:
        return stdout_failed(command, exc)
    return code
