"""The documented list-of-arrays API: registry decorator, lookup, and the four classic estimators.

Functions here take one reward array per group and return ``(advantages, returns)``, one
array per group, always as a pair. They run the same vectorized kernels as
:func:`rllm.compute_advantages`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, MutableMapping, Sequence
from typing import Any

import numpy as np

from rllm.config.algorithm import EstimatorName, estimator_name
from rllm.errors import EstimatorNotFoundError
from rllm.estimators.call import _accepted, as_list_callable, on_groups
from rllm.estimators.compute import get_estimator
from rllm.plugins.hookspecs import EstimatorStyle
from rllm.plugins.manager import get_plugin_manager
from rllm_builtin import estimators as kernels

GroupArrays = list[np.ndarray]


def register_rllm_adv_estimator(
    name: EstimatorName,
    *,
    style: EstimatorStyle = "grouped",
    requires: Sequence[str] = (),
    replace: bool = False,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator registering an estimator at run time under ``name``.

    Taking a name that is already registered (a built-in or a plugin's) needs
    ``replace=True``; re-running the same definition (a notebook cell) just updates it.
    """

    def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
        manager = get_plugin_manager()
        where = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"
        manager.add_estimator(
            estimator_name(name), fn, manager.runtime_source(where), style=style, requires=requires, replace=replace
        )
        return fn

    return decorator


def get_rllm_adv_estimator(name: EstimatorName) -> Callable[..., tuple[GroupArrays, GroupArrays]]:
    """The estimator registered as ``name``, callable as ``fn(rewards=[group arrays], **options)``."""
    return as_list_callable(get_estimator(name))


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


def _call(
    kernel: Callable[..., Any], rewards: Sequence[Any], options: dict[str, Any]
) -> tuple[GroupArrays, GroupArrays]:
    names, _ = _accepted(kernel)
    return on_groups(kernel, rewards, **{k: v for k, v in options.items() if k in names and v is not None})


def calculate_grpo_advantages(
    rewards: Sequence[np.ndarray],
    norm_adv_by_std_in_grpo: bool = True,
    epsilon: float | None = None,
    **kwargs: Any,
) -> tuple[GroupArrays, GroupArrays]:
    """GRPO per group: ``(r - mean) / (std + epsilon)``; population std, epsilon 1e-6 unless a ``preset`` differs."""
    eps = kwargs.pop("episilon", epsilon)
    return _call(kernels.grpo, rewards, {**kwargs, "norm_adv_by_std_in_grpo": norm_adv_by_std_in_grpo, "eps": eps})


def calculate_reinforce_advantages(rewards: Sequence[np.ndarray], **kwargs: Any) -> tuple[GroupArrays, GroupArrays]:
    """REINFORCE: the advantage is the reward (no baseline)."""
    return _call(kernels.reinforce, rewards, kwargs)


def calculate_reinforce_plus_plus_baseline_advantages(
    rewards: Sequence[np.ndarray], epsilon: float | None = None, **kwargs: Any
) -> tuple[GroupArrays, GroupArrays]:
    """REINFORCE++ with group-mean baseline, whitened by the std over all groups passed in."""
    eps = kwargs.pop("episilon", epsilon)
    return _call(kernels.reinforce_plus_plus_baseline, rewards, {**kwargs, "eps": eps})


def calculate_rloo_advantages(rewards: Sequence[np.ndarray], **kwargs: Any) -> tuple[GroupArrays, GroupArrays]:
    """RLOO (https://arxiv.org/abs/2402.14740): each reward minus the mean of the others in its group."""
    return _call(kernels.rloo, rewards, kwargs)


def _one_group(
    kernel: Callable[..., Any], rewards: np.ndarray, options: dict[str, Any]
) -> tuple[np.ndarray, np.ndarray]:
    advantages, returns = _call(kernel, [rewards], options)
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
    return _one_group(kernels.grpo, rewards, {"norm_adv_by_std_in_grpo": norm_adv_by_std_in_grpo, "eps": eps})


def calculate_rloo_advantages_per_group(rewards: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """RLOO for one group; a group of one keeps its raw reward. Always returns the pair."""
    return _one_group(kernels.rloo, rewards, {})
