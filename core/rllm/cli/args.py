"""The argument grammar every ``rllm`` command shares.

Config files come as ``-c/--config FILE`` (repeatable) or as positional ``.yaml``/``.yml``
words; overrides are ``key=value``, ``+key=value``, ``++key=value`` or ``~key`` (Hydra's
meaning, see :mod:`rllm.config.overrides`). Files are merged in the order given, ``-c`` ones
first, then the overrides in order.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rllm.config import current_schema, is_override, load_config
from rllm.errors import ConfigError

CONFIG_SUFFIXES = (".yaml", ".yml")
DOCS = "Docs: README.md and docs/*.md in the rllm repository."


class UsageError(ConfigError):
    """A command-line word the grammar cannot place; reported with the command's usage."""


def command_parser(sub: Any, name: str, summary: str, description: str, examples: list[str]) -> argparse.ArgumentParser:
    """A subcommand parser with plain-text help: ``description``, then examples and the docs pointer."""
    epilog = "Examples:\n" + "\n".join(f"  {example}" for example in examples) + f"\n\n{DOCS}"
    parser: argparse.ArgumentParser = sub.add_parser(
        name,
        help=summary,
        description=description,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(parser=parser)  # usage errors print this command's usage
    return parser


def add_config_arguments(parser: argparse.ArgumentParser, positional_help: str | None = None) -> None:
    """``-c/--config`` and the positional words (config files and overrides)."""
    parser.add_argument(
        "-c",
        "--config",
        action="append",
        default=[],
        metavar="FILE",
        help="YAML config file; repeat to merge several in order",
    )
    parser.add_argument(
        "words",
        nargs="*",
        metavar="FILE.yaml | key=value",
        help=positional_help
        or "config files, then overrides: key=value, +key=value (add), ++key=value (add or set), ~key (remove)",
    )


@dataclass
class ConfigArgs:
    """What the positional words and ``-c`` options amount to."""

    files: list[str] = field(default_factory=list)
    overrides: list[str] = field(default_factory=list)
    others: list[str] = field(default_factory=list)

    def load(self) -> Any:
        return load_config(*self.files, overrides=self.overrides)


def split_words(args: argparse.Namespace, others_allowed: int = 0) -> ConfigArgs:
    """Sort positional words into config files, overrides and (up to ``others_allowed``) other operands.

    A word that is none of these is a :class:`UsageError` saying what it looks like.
    """
    out = ConfigArgs(files=list(args.config))
    for word in args.words:
        if (
            others_allowed
            and not word.startswith(("+", "~"))
            and Path(word).is_file()
            and len(out.others) < others_allowed
        ):
            out.others.append(word)  # an existing file named like an override (`data=v1.jsonl`) is the file
        elif is_override(word):
            out.overrides.append(word)
        elif word.endswith(CONFIG_SUFFIXES):
            if not Path(word).is_file():
                raise UsageError(f"config file {word!r} does not exist.")
            out.files.append(word)
        elif len(out.others) < others_allowed:
            out.others.append(word)
        else:
            raise UsageError(_misplaced(word))
    return out


def _misplaced(word: str) -> str:
    schema = current_schema()
    known = set(schema.by_path()) | schema.sections()
    if word in known or any(word.startswith(root + ".") for root in schema.open_paths()):
        return f"{word!r} is a config key without a value; write {word}=VALUE (or ~{word} to remove it)."
    if word.startswith("-"):
        return f"unknown option {word!r}."
    if "/" in word or "." in Path(word).name or Path(word).exists():
        return f"{word!r} is not a config file (they end in .yaml or .yml) nor key=value."
    return f"{word!r} is neither a config file (.yaml) nor key=value; see the examples in --help."
