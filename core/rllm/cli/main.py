"""Entry point of the ``rllm`` console script.

Each subcommand is a module of :mod:`rllm.cli` with ``add_parser(sub)``, which adds its
parser and sets ``run`` (called with the parsed arguments, returning the exit code); list
a new one in :data:`COMMANDS`.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TextIO

from rllm.cli.args import DOCS, UsageError
from rllm.cli.stdout import Parser, stdout_failed
from rllm.errors import RLLMError
from rllm.version import __version__

COMMANDS = ("advantages", "config", "estimators", "losses", "plugins", "serve", "train")
"""Modules under rllm.cli, in the order ``rllm --help`` lists them."""

_DESCRIPTION = """Pluggable advantage estimation for LLM reinforcement learning.

Every command takes config files (-c FILE or FILE.yaml, repeatable) and overrides
(key=value, +key=value, ++key=value, ~key); `rllm config --keys` lists the keys."""

_EXAMPLES = (
    """Examples:
  rllm train rllm.trainer.total_batches=20
  rllm advantages rollouts.jsonl -e rloo -o scored.jsonl
  rllm config --keys

"""
    + DOCS
)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="rllm",
        description=_DESCRIPTION,
        epilog=_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"rllm {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        importlib.import_module(f"rllm.cli.{name}").add_parser(sub)
    return parser


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    """One line per warning, no source line, each text once per command: what a terminal user needs.

    (A config is checked where it is loaded and again by the trainer; its warnings are said once.)
    """
    text = " ".join(str(message).split())
    if text in _shown:
        return
    _shown.add(text)
    print(f"rllm: warning: {text}", file=file or sys.stderr)


_shown: set[str] = set()
"""The warnings this command has said."""


@contextmanager
def _terminal_warnings() -> Iterator[None]:
    """Show warnings as single lines."""
    _shown.clear()
    with warnings.catch_warnings():
        warnings.showwarning = _show_warning
        yield


def main(argv: Sequence[str] | None = None) -> int:
    with _terminal_warnings():
        parser = build_parser()
        try:
            args, extras = parser.parse_known_args(argv)
        except OSError as exc:  # --help or --version could not be written
            return stdout_failed("rllm", exc)
        command_parser = getattr(args, "parser", parser)
        if extras and hasattr(args, "words") and not any(e.startswith("-") and e != "-" for e in extras):
            args.words += extras  # words after options: `rllm advantages in.jsonl -e rloo key=value`
        elif extras:
            command_parser.error(f"unrecognized arguments: {' '.join(extras)}")
        return _run(parser, args)


def _run(parser: argparse.ArgumentParser, args: Any) -> int:
    try:
        code = int(args.run(args))
        sys.stdout.flush()  # a full device or closed pipe is reported here, not at interpreter exit
        return code
    except UsageError as exc:
        getattr(args, "parser", parser).print_usage(sys.stderr)
        print(f"rllm {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except RLLMError as exc:
        print(f"rllm {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        return stdout_failed(f"rllm {args.command}", exc)


if __name__ == "__main__":
    sys.exit(main())
