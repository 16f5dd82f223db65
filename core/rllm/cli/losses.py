"""``rllm losses``: every policy loss by name, who provides it, its aliases, modes and options."""

from __future__ import annotations

import argparse
from typing import Any

from rllm.cli.listing import add_listing_parser, print_listing, provider
from rllm.losses import LOSS_AGG_MODES, loss_entry
from rllm.plugins.manager import get_plugin_manager
from rllm.plugins.registry import LossEntry


def add_parser(sub: Any) -> None:
    add_listing_parser(
        sub,
        "losses",
        help="list policy losses with their plugin, aliases, aggregation modes and options",
        description="List every registered policy loss (rllm.algorithm.loss_fn), or one by name or alias, with "
        "the plugin and distribution that provide it, its aliases, the loss_agg_mode values it supports and "
        "the options it takes (with defaults). Listing imports no loss module.\n\n"
        "Example: rllm losses vanilla",
        run=run,
        name_help="show only this loss (an alias shows the loss it names)",
    )


def describe(entry: LossEntry) -> dict[str, Any]:
    """What ``rllm losses --json`` prints for one loss."""
    return {
        **provider(entry),
        "target": entry.target
        if isinstance(entry.target, str)
        else f"{entry.target.__module__}:{entry.target.__qualname__}",
        "doc": entry.doc,
        "aliases": list(entry.aliases),
        "agg_modes": list(entry.agg_modes or LOSS_AGG_MODES),
        "needs_old_log_probs": entry.needs_old_log_probs,
        "additive": entry.additive,
        "options": [option.as_json() for option in entry.options],
    }


def show(entry: LossEntry, item: dict[str, Any]) -> None:
    aliases = f"; aliases {', '.join(item['aliases'])}" if item["aliases"] else ""
    print(f"{item['name']}  ({item['provided_by']}{aliases})")
    if item["doc"]:
        print(f"    {item['doc'].replace('``', '')}")
    if entry.agg_modes is not None:
        print(f"    loss_agg_mode: {', '.join(entry.agg_modes)} only")
    if not entry.additive:
        print("    picks tokens by micro-batch statistics: micro-batches do not add up to the batch's loss")
    for option in entry.options:
        print(f"    {option.name} = {option.default!r}: {option.doc} ({option.expected()})")


def run(args: argparse.Namespace) -> int:
    if args.name is not None:
        entry = loss_entry(args.name)
        entries = [loss_entry(entry.alias_of) if entry.alias_of else entry]
    else:
        registry = get_plugin_manager().losses
        entries = [e for e in (registry.resolve(name) for name in registry.names()) if e.alias_of is None]
    return print_listing(entries, describe, args.json, show)
