"""Call a registered estimator on a batch, whatever its calling convention, and check its output.

Options reach estimators in two ways: ``options`` the caller named explicitly (an estimator
that cannot take one is an error naming it), and ``ambient`` options from the configuration,
which are passed only to estimators that accept them.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from functools import cache
from typing import Any

import numpy as np
from numpy.typing import NDArray

from rllm.errors import ConfigError, EstimatorOutputError, GroupError
from rllm.estimators.batch import AdvantageBatch, FloatArray, GroupLayout, Ragged
from rllm.plugins.registry import EstimatorEntry


@cache
def _accepted(fn: Callable[..., Any]) -> tuple[frozenset[str], bool]:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return frozenset(), True
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)
    return frozenset(p.name for p in params if p.kind is not inspect.Parameter.VAR_POSITIONAL), takes_any


def estimator_kwargs(entry: EstimatorEntry, options: Mapping[str, Any], ambient: Mapping[str, Any]) -> dict[str, Any]:
    names, takes_any = _accepted(entry.target)
    if not takes_any:
        unknown = sorted(set(options) - names)
        if unknown:
            allowed = ", ".join(sorted(names - {"batch", "rewards"})) or "none"
            raise ConfigError(
                f"Estimator {entry.name!r} ({entry.source.describe()}) does not take the option(s) "
                f"{', '.join(unknown)}; it takes: {allowed}."
            )
    kwargs = {k: v for k, v in ambient.items() if takes_any or k in names}
    kwargs.update(options)
    return kwargs


def run_estimator(
    entry: EstimatorEntry,
    batch: AdvantageBatch,
    options: Mapping[str, Any] | None = None,
    ambient: Mapping[str, Any] | None = None,
) -> FloatArray | Ragged:
    """Advantages of ``batch`` in its order, checked for shape and finiteness.

    One advantage per trajectory (a 1-D array), or, from a batch-style estimator that
    scores steps, a :class:`Ragged` with one row of per-step advantages per trajectory.
    """
    for name in entry.requires:
        batch.require(name, entry.name)
    kwargs = estimator_kwargs(entry, options or {}, ambient or {})
    if len(batch) == 0:
        return np.zeros(0, dtype=batch.dtype)
    if entry.style == "batch":
        result = entry.target(batch, **kwargs)
        advantages = result if isinstance(result, Ragged) else _as_flat(entry, result, len(batch))
    else:
        kwargs.pop("rewards", None)
        groups = batch.layout.split(batch.rewards)
        result = entry.target(rewards=groups, **kwargs)
        advantages = batch.layout.join(_per_group(entry, result, batch.layout), dtype=batch.dtype)
    _check_values(entry, batch, advantages)
    return advantages


def first_nonfinite(values: NDArray[Any]) -> tuple[int, int] | None:
    """Position of the first NaN/inf in ``values`` and how many there are; one cheap sum when all are finite."""
    with np.errstate(all="ignore"):
        if np.isfinite(np.add.reduce(values, dtype=np.float64)):  # a finite sum means every term is finite
            return None
    bad = ~np.isfinite(values)
    if not bad.any():
        return None
    return int(np.flatnonzero(bad)[0]), int(np.count_nonzero(bad))


def _check_values(entry: EstimatorEntry, batch: AdvantageBatch, advantages: FloatArray | Ragged) -> None:
    """Refuse non-finite advantages (one cheap sum in the common case) and per-step rows of the wrong count."""
    who = f"Estimator {entry.name!r} ({entry.source.describe()})"
    values = advantages.values if isinstance(advantages, Ragged) else advantages
    if isinstance(advantages, Ragged) and len(advantages) != len(batch):
        raise EstimatorOutputError(
            f"{who} returned per-step advantages for {len(advantages)} trajectories; the batch has {len(batch)}."
        )
    found = first_nonfinite(values)
    if found is None:
        return
    first, count = found
    if isinstance(advantages, Ragged):
        first = int(np.searchsorted(advantages.offsets, first, side="right")) - 1
    where = batch.layout.label(int(batch.layout.group_index[first]))
    raise EstimatorOutputError(
        f"{who} returned {count} non-finite advantage(s), first in group {where!r}. Check the "
        "estimator's handling of that group (e.g. a division by a zero std or a group of one)."
    )


def _as_flat(entry: EstimatorEntry, result: Any, n: int) -> FloatArray:
    advantages = np.asarray(result) if isinstance(result, np.ndarray | Sequence) else None
    if advantages is None or advantages.shape != (n,) or advantages.dtype.kind not in "fiub":
        got = f"shape {advantages.shape}, dtype {advantages.dtype}" if advantages is not None else type(result).__name__
        raise EstimatorOutputError(
            f"Estimator {entry.name!r} ({entry.source.describe()}) returned {got}; a batch-style estimator "
            f"must return one number per trajectory, an array of shape ({n},)."
        )
    return advantages


def _per_group(entry: EstimatorEntry, result: Any, layout: GroupLayout) -> list[np.ndarray]:
    """Accept ``advantages`` or ``(advantages, returns)`` from a grouped estimator and check sizes."""
    who = f"Estimator {entry.name!r} ({entry.source.describe()})"
    n_groups = layout.n_groups
    per_group = result
    if isinstance(result, tuple) and len(result) == 2 and _looks_like_groups(result[0], layout):
        per_group = result[0]
    if not isinstance(per_group, Sequence | np.ndarray) or len(per_group) != n_groups:
        got = len(per_group) if isinstance(per_group, Sequence | np.ndarray) else type(per_group).__name__
        raise EstimatorOutputError(
            f"{who} returned {got} advantage arrays for {n_groups} groups; a grouped estimator returns "
            "one array per group (or the pair (advantages, returns))."
        )
    out = []
    for g, values in enumerate(per_group):
        array = np.asarray(values, dtype=np.float64).reshape(-1) if np.ndim(values) <= 1 else np.asarray(values)
        if array.shape != (int(layout.sizes[g]),):
            raise EstimatorOutputError(
                f"{who} returned {array.shape} advantages for group {layout.label(g)!r}, which has "
                f"{int(layout.sizes[g])} trajectories; return one advantage per trajectory."
            )
        out.append(array)
    return out


def _looks_like_groups(candidate: Any, layout: GroupLayout) -> bool:
    if not isinstance(candidate, Sequence | np.ndarray) or len(candidate) != layout.n_groups:
        return False
    return all(np.ndim(v) == 1 and len(v) == int(s) for v, s in zip(candidate, layout.sizes, strict=True))


def on_groups(
    kernel: Callable[..., Any], rewards: Sequence[Any], **options: Any
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Run a batch-style ``kernel`` on per-group reward arrays; returns ``(advantages, returns)`` per group."""
    if len(rewards) == 0:
        return [], []
    arrays = [np.asarray(r, dtype=np.float64).reshape(-1) for r in rewards]
    empty = [g for g, a in enumerate(arrays) if len(a) == 0]
    if empty:
        raise GroupError(f"Reward group(s) at position {empty} are empty; every group needs at least one reward.")
    layout = GroupLayout.from_sizes([len(a) for a in arrays])
    parts = layout.split(kernel(AdvantageBatch(np.concatenate(arrays), layout), **options))
    return parts, list(parts)


def as_list_callable(entry: EstimatorEntry) -> Callable[..., tuple[list[np.ndarray], list[np.ndarray]]]:
    """The estimator in the documented list-of-arrays convention.

    Per-group reward arrays in, ``(advantages, returns)`` out.
    """
    if entry.style == "grouped":
        return entry.target  # type: ignore[no-any-return]

    def list_style(rewards: Sequence[np.ndarray], **kwargs: Any) -> tuple[list[np.ndarray], list[np.ndarray]]:
        return on_groups(lambda batch: run_estimator(entry, batch, ambient=kwargs), rewards)

    list_style.__name__ = f"{entry.name}_advantages"
    list_style.__doc__ = entry.target.__doc__
    return list_style
