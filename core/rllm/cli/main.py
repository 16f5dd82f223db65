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
from rllm.errors import RLLMError
from rllm.version import __version__

COMMANDS = ("advantages", "config", "estimators", "losses", "plugins", "train")
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
    parser = argparse.ArgumentParser(
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
    """One line per warning, no source line: what a terminal user needs."""
    text = " ".join(str(message).split())
    print(f"rllm: warning: {text}", file=file or sys.stderr)


@contextmanager
def _terminal_warnings() -> Iterator[None]:
    """Show warnings as single lines, including rllm's deprecation notices about the user's config."""
    with warnings.catch_warnings():
        warnings.filterwarnings("default", category=DeprecationWarning, module=r"rllm(\.|$)")
        warnings.showwarning = _show_warning
        yield


def main(argv: Sequence[str] | None = None) -> int:
    with _terminal_warnings():
        parser = build_parser()
        args, extras = parser.parse_known_args(argv)
        command_parser = getattr(args, "parser", parser)
        if extras and hasattr(args, "words") and not any(e.startswith("-") and e != "-" for e in extras):
            args.words += extras  # words after options: `rllm advantages in.jsonl -e rloo key=value`
        elif extras:
            command_parser.error(f"unrecognized arguments: {' '.join(extras)}")
        return _run(parser, args)


def _run(parser: argparse.ArgumentParser, args: Any) -> int:
    try:
        return int(args.run(args))
    except UsageError as exc:
        getattr(args, "parser", parser).print_usage(sys.stderr)
        print(f"rllm {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except RLLMError as exc:
        print(f"rllm {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into `head`
        return 0


if __name__ == "__main__":
    sys.exit(main())
