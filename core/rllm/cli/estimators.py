"""``rllm estimators``: every estimator by name, who provides it, what it needs and which options it takes."""

from __future__ import annotations

import argparse
from typing import Any

from rllm.cli.listing import add_listing_parser, print_listing, provider
from rllm.contract.options import NUMERICS_OPTIONS
from rllm.estimators.compute import get_estimator
from rllm.plugins.manager import get_plugin_manager
from rllm.plugins.registry import EstimatorEntry


def add_parser(sub: Any) -> None:
    add_listing_parser(
        sub,
        "estimators",
        help="list estimators with their plugin, inputs and options",
        description="List every registered estimator, or one by name, with the plugin and distribution that "
        "provide it, the batch fields it requires and the options it takes (with defaults).\n\n"
        "Example: rllm estimators grpo",
        run=run,
        name_help="show only this estimator",
    )


def describe(entry: EstimatorEntry) -> dict[str, Any]:
    """What ``rllm estimators --json`` prints for one estimator."""
    declaration = entry.declaration
    options = list(declaration.options) + (list(NUMERICS_OPTIONS) if declaration.numerics else [])
    return {
        **provider(entry),
        "style": entry.style,
        "doc": entry.doc,
        "requires": list(entry.requires),
        "options": [option.as_json() for option in options],
        "numerics": declaration.numerics,
        "options_declared": declaration.declared,
        "accepts_any_option": declaration.open,
    }


def show(entry: EstimatorEntry, item: dict[str, Any]) -> None:
    print(f"{item['name']}  ({item['provided_by']}, {item['style']} style)")
    if item["doc"]:
        print(f"    {item['doc'].replace('``', '')}")
    if item["requires"]:
        print(f"    requires: {', '.join(item['requires'])}")
    if not item["options_declared"]:
        note = "any keyword option" if item["accepts_any_option"] else "the options its signature names"
        print(f"    options: not declared; takes {note}")
    for option in entry.declaration.options:
        print(f"    {option.name} = {option.default!r}: {option.doc} ({option.expected()})")
    if item["numerics"]:
        names = ", ".join(option.name for option in NUMERICS_OPTIONS)
        print(f"    numerics options: {names} (see docs/estimators.md)")


def run(args: argparse.Namespace) -> int:
    if args.name is not None:
        entries = [get_estimator(args.name)]
    else:
        registry = get_plugin_manager().estimators
        entries = [registry.resolve(name) for name in registry.names()]
    return print_listing(entries, describe, args.json, show)
