"""What the listing commands (``rllm estimators``, ``rllm losses``) share: arguments, provider fields, output."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from rllm.plugins.registry import Entry

E = TypeVar("E")


def add_listing_parser(
    sub: Any, command: str, *, help: str, description: str, run: Callable[[argparse.Namespace], int], name_help: str
) -> None:
    """``rllm <command> [NAME] [--json]``."""
    parser = sub.add_parser(
        command, help=help, description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("name", nargs="?", help=name_help)
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON")
    parser.set_defaults(run=run)


def provider(entry: Entry) -> dict[str, Any]:
    """The name of an entry and who provides it, as every listing's JSON begins."""
    return {
        "name": entry.name,
        "plugin": entry.source.plugin,
        "distribution": entry.source.distribution,
        "version": entry.source.version,
        "provided_by": entry.source.describe(),
    }


def print_listing(
    entries: Sequence[E],
    describe: Callable[[E], dict[str, Any]],
    as_json: bool,
    show: Callable[[E, dict[str, Any]], None],
) -> int:
    """Each entry as JSON (one list) or as text (``show`` prints one entry from its description)."""
    described = [describe(entry) for entry in entries]
    if as_json:
        print(json.dumps(described, indent=2))
        return 0
    for entry, item in zip(entries, described, strict=True):
        show(entry, item)
    return 0
