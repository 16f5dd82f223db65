"""Losses by name: the plugins' registrations, loading a loss on first use, and checking a run's choice."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from rllm.errors import LossOptionError
from rllm.losses.aggregation import check_agg_mode
from rllm.losses.context import LossFn
from rllm.plugins.registry import LossEntry


def _registry() -> Any:
    from rllm.plugins.manager import get_plugin_manager

    return get_plugin_manager().losses


def loss_names() -> list[str]:
    """Every registered loss name and alias."""
    return list(_registry().names())


def loss_entry(name: str) -> LossEntry:
    """The registration of loss ``name`` (an alias resolves to its own claim); unknown: a named error."""
    entry: LossEntry = _registry().resolve(name)
    return entry


def get_loss(name: str) -> LossFn:
    """The loss function registered as ``name``, imported on first use: call it with a :class:`LossContext`."""
    return loss_entry(name).load()


def resolve_loss_options(
    name: str, options: Mapping[str, Any] | None = None, agg_mode: str = "token-mean"
) -> tuple[LossEntry, dict[str, Any], str]:
    """Check a run's choice of loss before anything runs: the entry, every declared option, the mode.

    An option the loss does not declare, an ill-typed value or an aggregation mode it does not
    support is a one-line :class:`~rllm.errors.LossOptionError` naming the key and close matches.
    """
    entry = loss_entry(name)
    given = dict(options or {})
    declared = {o.name: o for o in entry.options}
    who = entry.source.describe()
    for key in given:
        if key not in declared:
            close = difflib.get_close_matches(key, list(declared), n=3, cutoff=0.5)
            hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
            takes = ", ".join(declared) or "no options"
            raise LossOptionError(f"Loss {name!r} ({who}) has no option {key!r}.{hint} It takes: {takes}.")
    resolved = {
        o.name: o.check(given[o.name], name, who, what="loss", error=LossOptionError) if o.name in given else o.default
        for o in entry.options
    }
    mode = check_agg_mode(agg_mode, "loss_agg_mode", entry.agg_modes)
    return entry, resolved, mode
