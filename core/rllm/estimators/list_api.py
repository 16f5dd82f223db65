"""The documented list-of-arrays API: registry decorator, lookup, and the four classic estimators.

Functions here take one reward array per group and return ``(advantages, returns)``, one
array per group, always as a pair. They run the same vectorized kernels as
:func:`rllm.compute_advantages`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, MutableMapping, Sequence
from typing import Any

import numpy as np

from rllm.errors import EstimatorNotFoundError, GroupError
from rllm.estimators.batch import AdvantageBatch, GroupLayout
from rllm.estimators.compute import get_estimator
from rllm.estimators.names import EstimatorName, estimator_name
from rllm.estimators.pipeline import invoke
from rllm.plugins.hookspecs import EstimatorStyle
from rllm.plugins.manager import get_plugin_manager
from rllm.plugins.options import Option
from rllm.plugins.registry import EstimatorEntry

GroupArrays = list[np.ndarray]


def register_rllm_adv_estimator(
    name: EstimatorName,
    *,
    style: EstimatorStyle = "grouped",
    requires: Sequence[str] = (),
    options: Sequence[Option] | None = None,
    numerics: bool | str = False,
    replace: bool = False,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator registering an estimator at run time under ``name``.

    Taking a name that is already registered (a built-in or a plugin's) needs
    ``replace=True``; re-running the same definition (a notebook cell) just updates it.
    ``options`` and ``numerics`` declare what the estimator accepts, as for plugins.
    """

    def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
        manager = get_plugin_manager()
        where = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"
        manager.add_estimator(
            estimator_name(name),
            fn,
            manager.runtime_source(where),
            style=style,
            requires=requires,
            options=options,
            numerics=numerics,
            replace=replace,
        )
        return fn

    return decorator


def run_on_groups(
    entry: EstimatorEntry, rewards: Sequence[Any], options: dict[str, Any]
) -> tuple[GroupArrays, GroupArrays]:
    """The list-of-arrays door: per-group reward arrays in, ``(advantages, returns)`` per group out."""
    arrays = [np.asarray(r, dtype=np.float64).reshape(-1) for r in rewards]
    empty = [g for g, a in enumerate(arrays) if len(a) == 0]
    if empty:
        raise GroupError(f"Reward group(s) at position {empty} are empty; every group needs at least one reward.")
    layout = GroupLayout.from_sizes([len(a) for a in arrays])
    batch = AdvantageBatch(np.concatenate(arrays) if arrays else np.zeros(0), layout)
    nonfinite = options.pop("nonfinite_rewards", "error")
    advantages = invoke(entry, batch, options, nonfinite_rewards=nonfinite).advantages
    parts = layout.split(np.asarray(advantages)) if len(arrays) else []
    return parts, [part.copy() for part in parts]


def _list_callable(entry: EstimatorEntry, label: str) -> Callable[..., tuple[GroupArrays, GroupArrays]]:
    def estimator(rewards: Sequence[Any], **options: Any) -> tuple[GroupArrays, GroupArrays]:
        return run_on_groups(entry, rewards, options)

    estimator.__name__ = f"{label}_advantages"
    estimator.__doc__ = entry.target.__doc__
    return estimator


def get_rllm_adv_estimator(name: EstimatorName) -> Callable[..., tuple[GroupArrays, GroupArrays]]:
    """The estimator registered as ``name``, callable as ``fn(rewards=[group arrays], **options)``.

    Whatever its style, it returns the pair ``(advantages, returns)``, one array per group.
    """
    entry = get_estimator(name)
    return _list_callable(entry, entry.name)


class EstimatorRegistryView(MutableMapping[str, Callable[..., Any]]):
    """Dict-like view of the estimator registry, for code that indexes it directly.

    Reading gives the list-of-arrays callable; assigning registers (and replaces) a grouped
    estimator from user code; deleting removes only user-code registrations.
    """

    def __getitem__(self, name: EstimatorName) -> Callable[..., Any]:
        try:
            return get_rllm_adv_estimator(name)
        except EstimatorNotFoundError as exc:
            raise KeyError(str(exc)) from exc

    def __setitem__(self, name: EstimatorName, fn: Callable[..., Any]) -> None:
        register_rllm_adv_estimator(name, replace=True)(fn)

    def __delitem__(self, name: EstimatorName) -> None:
        registry = get_plugin_manager().estimators
        key = estimator_name(name)
        runtime = [c for c in registry.claims(key) if c.source.kind == "runtime"]
        if not runtime:
            raise KeyError(f"No estimator registered by user code under {key!r}; plugins' estimators stay.")
        for claim in runtime:
            registry.discard_source(claim.source)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in get_plugin_manager().estimators

    def __iter__(self) -> Iterator[str]:
        return iter(get_plugin_manager().estimators.names())

    def __len__(self) -> int:
        return len(get_plugin_manager().estimators)


RLLM_ADV_ESTIMATOR_REGISTRY = EstimatorRegistryView()


def _builtin(name: str) -> EstimatorEntry:
    """The built-in plugin's estimator ``name``, even when a plugin or user code took the name over."""
    claims = get_plugin_manager().estimators.claims(name)
    builtin = [claim for claim in claims if claim.source.kind == "builtin"]
    return builtin[0] if builtin else get_estimator(name)


def calculate_grpo_advantages(
    rewards: Sequence[np.ndarray],
    norm_adv_by_std_in_grpo: bool = True,
    epsilon: float | None = None,
    **kwargs: Any,
) -> tuple[GroupArrays, GroupArrays]:
    """GRPO per group: ``(r - mean) / (std + epsilon)``; population std, epsilon 1e-6 unless a ``preset`` differs."""
    options = {"norm_adv_by_std_in_grpo": norm_adv_by_std_in_grpo, **kwargs}
    if epsilon is not None:
        options["epsilon"] = epsilon
    return run_on_groups(_builtin("grpo"), rewards, options)


def calculate_reinforce_advantages(rewards: Sequence[np.ndarray], **kwargs: Any) -> tuple[GroupArrays, GroupArrays]:
    """REINFORCE: the advantage is the reward (no baseline)."""
    return run_on_groups(_builtin("reinforce"), rewards, kwargs)


def calculate_reinforce_plus_plus_baseline_advantages(
    rewards: Sequence[np.ndarray], epsilon: float | None = None, **kwargs: Any
) -> tuple[GroupArrays, GroupArrays]:
    """REINFORCE++ with group-mean baseline, whitened by the std over all groups passed in."""
    options = dict(kwargs) if epsilon is None else {**kwargs, "epsilon": epsilon}
    return run_on_groups(_builtin("reinforce_plus_plus_baseline"), rewards, options)


def calculate_rloo_advantages(rewards: Sequence[np.ndarray], **kwargs: Any) -> tuple[GroupArrays, GroupArrays]:
    """RLOO (https://arxiv.org/abs/2402.14740): each reward minus the mean of the others in its group."""
    return run_on_groups(_builtin("rloo"), rewards, kwargs)


def _one_group(name: str, rewards: np.ndarray, options: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    advantages, returns = run_on_groups(_builtin(name), [rewards], options)
    return advantages[0], returns[0]


def calculate_grpo_advantages_per_group(
    rewards: np.ndarray,
    norm_adv_by_std_in_grpo: bool = True,
    episilon: float = 1e-6,
    *,
    epsilon: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """GRPO for one group; ``epsilon`` (or the documented spelling ``episilon``) guards the std."""
    eps = episilon if epsilon is None else epsilon
    return _one_group("grpo", rewards, {"norm_adv_by_std_in_grpo": norm_adv_by_std_in_grpo, "eps": eps})


def calculate_rloo_advantages_per_group(rewards: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """RLOO for one group; a group of one keeps its raw reward. Always returns the pair."""
    return _one_group("rloo", rewards, {})
