"""Losses by name: the plugins' registrations, loading a loss on first use, and checking a run's choice."""

from __future__ import annotations

import difflib
import warnings
from collections.abc import Mapping
from typing import Any

from rllm.errors import LossOptionError, RLLMWarning
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


_ANNOUNCED: set[str] = set()
"""Losses whose own aggregation mode has been announced (once per process)."""


def resolve_loss_options(
    name: str, options: Mapping[str, Any] | None = None, agg_mode: str | None = None, key: str = "loss_agg_mode"
) -> tuple[LossEntry, dict[str, Any], str]:
    """Check a run's choice of loss before anything runs: the entry, every declared option, the mode.

    An option the loss does not declare, an ill-typed value or an aggregation mode it does not
    support is a one-line :class:`~rllm.errors.LossOptionError` naming the key and close matches.
    ``agg_mode`` None (the user set none) is ``token-mean``, or the loss's own mode when it fixes
    its aggregation (``sapo``, ``geo_mean``), which is said once; ``key`` names the mode's key.
    """
    entry = loss_entry(name)
    given = dict(options or {})
    declared = {o.name: o for o in entry.options}
    who = entry.source.describe()
    for option in given:
        if option not in declared:
            close = difflib.get_close_matches(option, list(declared), n=3, cutoff=0.5)
            hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
            takes = ", ".join(declared) or "no options"
            raise LossOptionError(f"Loss {name!r} ({who}) has no option {option!r}.{hint} It takes: {takes}.")
    resolved = {
        o.name: o.check(given.get(o.name), name, who, what="loss", error=LossOptionError)
        if o.name in given or o.required
        else o.default
        for o in entry.options
    }
    return entry, resolved, _mode(entry, name, who, agg_mode, key)


def _mode(entry: LossEntry, name: str, who: str, agg_mode: str | None, key: str) -> str:
    own = entry.agg_modes
    if agg_mode is None:
        if own is None or "token-mean" in own:
            return "token-mean"
        if entry.name not in _ANNOUNCED:
            _ANNOUNCED.add(entry.name)
            warnings.warn(
                f"Loss {name!r} ({who}) fixes its own aggregation, {own[0]}; {key} is left to it.",
                RLLMWarning,
                stacklevel=2,
            )
        return own[0]
    mode = check_agg_mode(agg_mode, key)
    if own is not None and mode not in own:
        raise LossOptionError(
            f"{key}={mode!r} does not fit loss {name!r} ({who}), which aggregates by {', '.join(own)} only; "
            f"set {key} to {own[0]!r} or leave it unset."
        )
    return mode
