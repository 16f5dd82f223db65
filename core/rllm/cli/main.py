"""Entry point of the ``rllm`` console script."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from types import ModuleType

from rllm.errors import RLLMError


def _commands() -> list[ModuleType]:
    from rllm.cli import advantages, estimators, plugins, train

    return [advantages, estimators, plugins, train]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rllm", description="Pluggable advantage estimation for LLM RL.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in _commands():
        module.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args))
    except RLLMError as exc:
        print(f"rllm {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into `head`
        return 0


if __name__ == "__main__":
    sys.exit(main())
