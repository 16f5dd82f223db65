"""The one way an estimator is run, whichever door the caller came through.

``compute_advantages``, the collection step, the list-of-arrays API (``get_rllm_adv_estimator``
and the ``calculate_*`` functions) and ``mix`` components all call :func:`invoke`, so every
door applies the same input check (non-finite rewards: an error naming the group, or the
``nonfinite_rewards`` policy), the same option policy (declared options, see
:mod:`rllm.plugins.options`), read-only inputs, and the same output check.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from rllm.contract.names import NONFINITE_POLICIES
from rllm.contract.options import CONFIG_NAMES, CONTEXT_NAMES, NUMERICS_NAMES
from rllm.errors import (
    EstimatorFailedError,
    EstimatorOptionError,
    EstimatorOutputError,
    MissingInputError,
    RewardError,
    RLLMError,
    RLLMWarning,
    UserCodeExit,
)
from rllm.estimators.batch import AdvantageBatch
from rllm.estimators.layout import GroupLayout
from rllm.estimators.numerics import resolve_numerics
from rllm.estimators.ragged import FloatArray, Ragged
from rllm.estimators.state import EstimatorState, state_factory
from rllm.plugins.options import resolve_options
from rllm.plugins.registry import EstimatorEntry
from rllm.usercode import call_user

_SAFE_SQUARES = 1e300
"""Below this sum of squared rewards no statistic can overflow (one dot product checks finiteness too)."""


@dataclass(frozen=True)
class Outcome:
    """Advantages in the batch's order, and what the non-finite policy left out (None: nothing)."""

    advantages: FloatArray | Ragged
    zeroed_groups: NDArray[np.bool_] | None = None
    """``nonfinite_rewards="zero"``: groups that got zero advantage."""
    excluded: NDArray[np.bool_] | None = None
    """``nonfinite_rewards="exclude"``: trajectories left out of every statistic, with advantage 0."""

    def counted(self, layout: GroupLayout) -> NDArray[np.bool_] | None:
        """Per trajectory, whether its reward counts in summaries (None: all of them)."""
        if self.excluded is not None:
            return ~self.excluded
        return None if self.zeroed_groups is None else ~layout.spread(self.zeroed_groups)


def invoke(
    entry: EstimatorEntry,
    batch: AdvantageBatch,
    options: Mapping[str, Any] | None = None,
    *,
    ambient: Mapping[str, Any] | None = None,
    nonfinite_rewards: str = "error",
    context: Mapping[str, Any] | None = None,
    state: EstimatorState | None = None,
) -> Outcome:
    """Run ``entry`` on ``batch``: checked rewards, checked options, read-only inputs, checked output.

    ``options`` are what the caller named (an option the estimator does not declare is an
    error); ``ambient`` are run-configuration settings, passed only to estimators that declare them.
    ``context`` (``algorithm_config``, ``traj_groups``) reaches estimators whose signature takes it;
    one that takes ``algorithm_config`` gets a default config built from the run settings when
    the caller has none. A stateful estimator (:mod:`rllm.estimators.state`) receives ``state``,
    or a fresh one.
    """
    for name in entry.requires:
        batch.require(name, entry.name)
    batch.nonfinite_rewards = nonfinite_rewards
    zeroed = check_rewards(batch, nonfinite_rewards)
    options = dict(options or {})
    context = {**{k: options.pop(k) for k in CONTEXT_NAMES if k in options}, **(context or {})}
    kwargs = _keyword_arguments(entry, options, ambient or {})
    kwargs.update(_context_arguments(entry, context, {**(ambient or {}), **options}))
    factory = state_factory(entry.target)
    if factory is not None:
        kwargs["state"] = state if state is not None else factory()
    if zeroed is not None and (nonfinite_rewards == "exclude" or factory is not None):
        # A stateful estimator must not learn from rewards that were never scored, so it never sees them.
        return _without_unscorable(entry, batch, kwargs, zeroed if nonfinite_rewards == "zero" else None)
    if len(batch) == 0:
        return Outcome(np.zeros(0, dtype=batch.dtype))
    batch.freeze()
    advantages = _call(entry, batch, kwargs)
    _check_values(entry, batch, advantages)
    if zeroed is not None:
        advantages = _zero_groups(advantages, batch.layout, zeroed)
    return Outcome(advantages, zeroed)


def _keyword_arguments(entry: EstimatorEntry, options: Mapping[str, Any], ambient: Mapping[str, Any]) -> dict[str, Any]:
    declaration = entry.declaration
    preset = options.get("preset", ambient.get("preset"))
    if preset is not None and not declaration.numerics:  # ignored by this estimator, but must still be a preset
        resolve_numerics(preset, estimator=entry.name)
    kwargs = resolve_options(entry.name, declaration, options, ambient, entry.source.describe())
    if declaration.numerics:
        chosen = {k: kwargs.pop(k) for k in list(kwargs) if k in NUMERICS_NAMES}
        preset = chosen.pop("preset", None) or declaration.default_preset
        kwargs["numerics"] = resolve_numerics(preset, estimator=entry.name, **chosen)
    return kwargs


def _context_arguments(
    entry: EstimatorEntry, context: Mapping[str, Any], settings: Mapping[str, Any]
) -> dict[str, Any]:
    """The context names ``entry``'s signature takes, from ``context`` (a default ``algorithm_config``)."""
    declaration = entry.declaration
    given = {name: context[name] for name in declaration.wants if context.get(name) is not None}
    if "algorithm_config" in declaration.wants and "algorithm_config" not in given:
        from rllm.config.algorithm import AlgorithmConfig  # the config package imports the estimators

        fields = {k: v for k, v in settings.items() if k in CONFIG_NAMES and k != "preset" and v is not None}
        given["algorithm_config"] = AlgorithmConfig(**fields)
    missing = [name for name in declaration.needs if name not in given]
    if missing:
        raise MissingInputError(
            f"Estimator {entry.name!r} ({entry.source.describe()}) takes {', '.join(missing)}, which this "
            "caller did not give. The collection step passes the role's TrajectoryGroups; through the list "
            "API pass traj_groups=[...] aligned with the reward groups."
        )
    return given


def first_nonfinite(values: NDArray[Any]) -> tuple[int, int] | None:
    """Position of the first NaN/inf in ``values`` and how many there are; one cheap sum when all are finite."""
    with np.errstate(all="ignore"):
        if np.isfinite(np.add.reduce(values, dtype=np.float64)):  # a finite sum means every term is finite
            return None
    bad = ~np.isfinite(values)
    if not bad.any():
        return None
    return int(np.flatnonzero(bad)[0]), int(np.count_nonzero(bad))


def _without_unscorable(
    entry: EstimatorEntry, batch: AdvantageBatch, kwargs: dict[str, Any], zeroed: NDArray[np.bool_] | None = None
) -> Outcome:
    """Run the estimator on the rollouts with finite rewards only (or outside ``zeroed`` groups); the others get 0.

    Left out of the batch, unscorable rollouts cannot move any group or batch statistic, nor
    a stateful estimator's state.
    """
    excluded = ~np.isfinite(batch.rewards) if zeroed is None else batch.layout.spread(zeroed)
    keep = ~excluded
    sub = batch.subset(keep)
    sub.freeze()
    partial_advantages = _call(entry, sub, kwargs) if len(sub) else np.zeros(0, dtype=batch.dtype)
    _check_values(entry, sub, partial_advantages)
    if isinstance(partial_advantages, Ragged):
        rows = batch.require("step_rewards", entry.name)
        values = np.zeros(len(rows.values), dtype=partial_advantages.values.dtype)
        values[np.repeat(keep, rows.lengths)] = partial_advantages.values
        result: FloatArray | Ragged = rows.with_values(values)
    else:
        result = np.zeros(len(batch), dtype=np.asarray(partial_advantages).dtype)
        result[keep] = partial_advantages
    return Outcome(result, zeroed) if zeroed is not None else Outcome(result, excluded=excluded)


def check_rewards(batch: AdvantageBatch, policy: str) -> NDArray[np.bool_] | None:
    """None when every reward is finite; else the error naming the group, or a mask of such groups.

    Under ``zero`` the batch's non-finite rewards become 0 and a warning names the groups;
    under ``exclude`` the mask is returned and the rewards stay as they are.
    """
    if policy not in NONFINITE_POLICIES:
        raise EstimatorOptionError(
            f"nonfinite_rewards must be one of {', '.join(map(repr, NONFINITE_POLICIES))}; got {policy!r}."
        )
    with np.errstate(all="ignore"):
        squares = float(np.dot(batch.rewards, batch.rewards))
    if squares < _SAFE_SQUARES:
        return None
    found = first_nonfinite(batch.rewards)
    if found is None:  # finite, but squaring overflows: statistics must scale first
        batch.large_values = True
        return None
    first, count = found
    layout = batch.layout
    if policy == "error":
        group = layout.label(int(layout.group_index[first]))
        where = batch.describe(first) if batch.describe else f"at position {first} in group {group!r}"
        raise RewardError(
            f"{count} reward(s) are missing, NaN or infinite; the first is {where} (value {batch.rewards[first]}). "
            "Fix the reward function, drop those rollouts, or set nonfinite_rewards='zero' to give such "
            "groups zero advantage."
        )
    bad = ~np.isfinite(batch.rewards)
    zeroed = np.zeros(layout.n_groups, dtype=bool)
    zeroed[layout.group_index[bad]] = True
    if policy == "exclude":
        return zeroed
    names = ", ".join(repr(layout.label(int(g))) for g in np.flatnonzero(zeroed)[:5])
    warnings.warn(
        f"{int(zeroed.sum())} group(s) have NaN or infinite rewards and get zero advantage "
        f"(nonfinite_rewards=zero): {names}.",
        RLLMWarning,
        stacklevel=3,
    )
    batch.rewards = np.where(layout.spread(zeroed), 0.0, batch.rewards).astype(batch.dtype, copy=False)
    return zeroed


def _zero_groups(
    advantages: FloatArray | Ragged, layout: GroupLayout, zeroed: NDArray[np.bool_]
) -> FloatArray | Ragged:
    keep = ~layout.spread(zeroed)
    if isinstance(advantages, Ragged):
        return advantages.with_values(np.where(advantages.expand(keep), advantages.values, 0.0))
    return np.where(keep, advantages, 0.0).astype(advantages.dtype, copy=False)


def _call(entry: EstimatorEntry, batch: AdvantageBatch, kwargs: dict[str, Any]) -> FloatArray | Ragged:
    who = f"Estimator {entry.name!r} ({entry.source.describe()})"
    try:
        if entry.style == "batch":
            result = call_user(entry.target, batch, **kwargs)
        else:
            result = call_user(entry.target, rewards=batch.layout.split(batch.rewards), **kwargs)
    except UserCodeExit as exc:  # an estimator cannot end the caller's process; a real Ctrl-C still does
        raise EstimatorFailedError(
            f"{who} {exc.how} instead of returning advantages; an estimator raises an exception to fail."
        ) from None
    except RLLMError:
        raise
    except ValueError as exc:
        if "read-only" in str(exc):
            raise EstimatorFailedError(
                f"{who} wrote into its input arrays, which are read-only so that callers' data stays intact. "
                "Copy them first (e.g. rewards.astype(float, copy=True))."
            ) from exc
        raise EstimatorFailedError(f"{who} raised ValueError: {exc}") from exc
    except TypeError as exc:
        if "unexpected keyword argument" in str(exc):
            raise EstimatorOptionError(f"{who} does not accept an option it was given: {exc}.") from exc
        raise EstimatorFailedError(f"{who} raised TypeError: {exc}") from exc
    except Exception as exc:
        raise EstimatorFailedError(f"{who} raised {type(exc).__name__}: {exc}") from exc
    if entry.style == "batch":
        return result if isinstance(result, Ragged) else _as_flat(entry, result, batch)
    return batch.layout.join(_per_group(entry, result, batch.layout), dtype=batch.dtype)


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


def _as_flat(entry: EstimatorEntry, result: Any, batch: AdvantageBatch) -> FloatArray:
    """The estimator's array checked, as a writable float array the caller owns.

    float16, integer and boolean outputs become the batch's float type; an input handed
    back (``return batch.rewards``, even made writable) is copied, so the caller's data stays intact.
    """
    n = len(batch)
    advantages = np.asarray(result) if isinstance(result, np.ndarray | Sequence) else None
    if advantages is None or advantages.shape != (n,) or advantages.dtype.kind not in "fiub":
        got = f"shape {advantages.shape}, dtype {advantages.dtype}" if advantages is not None else type(result).__name__
        raise EstimatorOutputError(
            f"Estimator {entry.name!r} ({entry.source.describe()}) returned {got}; a batch-style estimator "
            f"must return one number per trajectory, an array of shape ({n},)."
        )
    owned = advantages.flags.writeable and advantages.flags.owndata and not _shares_input(advantages, batch)
    narrow = advantages.dtype.kind != "f" or advantages.dtype.itemsize < 4
    if narrow or not owned:
        return np.array(advantages, dtype=batch.dtype if narrow else advantages.dtype)
    return advantages


def _shares_input(array: NDArray[Any], batch: AdvantageBatch) -> bool:
    inputs = [batch.rewards, *(v for v in vars(batch).values() if isinstance(v, np.ndarray))]
    return any(np.may_share_memory(array, other) for other in inputs)


def _per_group(entry: EstimatorEntry, result: Any, layout: GroupLayout) -> list[NDArray[Any]]:
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
        given = np.asarray(values)
        if given.dtype.kind not in "fiub":
            raise EstimatorOutputError(
                f"{who} returned advantages of dtype {given.dtype} for group {layout.label(g)!r}; "
                "advantages are real numbers (strings, complex numbers and objects are refused, not converted)."
            )
        array = given.astype(np.float64).reshape(-1) if given.ndim <= 1 else given
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
