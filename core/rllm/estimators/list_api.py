"""The documented list-of-arrays API: registry decorator, lookup, and the four classic estimators.

Functions here take one reward array per group and return ``(advantages, returns)``, one
array per group, always as a pair. They run the same vectorized kernels as
:func:`rllm.compute_advantages`. Both of rLLM's calling conventions work: the seed's
``fn(rewards, **options)`` and today's ``fn(rewards, algorithm_config, **kwargs)``, where the
config's switches (``norm_adv_by_std_in_grpo``, ``epsilon``, ``estimator_options``, ...) apply
and ``traj_groups=[...]`` reaches estimators that read it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, MutableMapping, Sequence
from typing import Any

import numpy as np

from rllm.config.algorithm import AlgorithmConfig
from rllm.config.names import EstimatorName, estimator_name
from rllm.contract.keys import Option
from rllm.contract.names import EstimatorStyle
from rllm.errors import ConfigError, EstimatorCallError, EstimatorNotFoundError, GroupError
from rllm.estimators.batch import AdvantageBatch
from rllm.estimators.compute import get_estimator
from rllm.estimators.layout import GroupLayout
from rllm.estimators.pipeline import invoke
from rllm.estimators.resolution import Resolved, resolve_plugins
from rllm.plugins.manager import get_plugin_manager
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
    entry: EstimatorEntry,
    rewards: Sequence[Any],
    options: dict[str, Any],
    *,
    algorithm_config: AlgorithmConfig | None = None,
    traj_groups: Sequence[Any] | None = None,
    resolved: Resolved | None = None,
) -> tuple[GroupArrays, GroupArrays]:
    """The list-of-arrays door: per-group reward arrays in, ``(advantages, returns)`` per group out.

    With ``algorithm_config`` its run settings and ``estimator_options`` apply (explicit
    ``options`` win) and estimators that take the config receive it; ``traj_groups`` (aligned
    with ``rewards``) reach estimators that take them. ``resolved`` is what the caller already
    resolved from the plugins for ``entry`` (default: resolved here, once).
    """
    if resolved is None:
        resolved = resolve_plugins(entry)
    arrays = _group_arrays(entry.name, rewards)
    empty = [g for g, a in enumerate(arrays) if len(a) == 0]
    if empty:
        raise GroupError(f"Reward group(s) at position {empty} are empty; every group needs at least one reward.")
    layout = GroupLayout.from_sizes([len(a) for a in arrays], kernels=resolved.kernels)
    batch = AdvantageBatch(np.concatenate(arrays) if arrays else np.zeros(0), layout, fields=resolved.fields)
    nonfinite = options.pop("nonfinite_rewards", None)
    ambient: dict[str, Any] = {}
    context: dict[str, Any] = {}
    if algorithm_config is not None:
        if not isinstance(algorithm_config, AlgorithmConfig):
            raise ConfigError(
                f"Estimator {entry.name!r} was given algorithm_config of type {type(algorithm_config).__name__}; "
                "pass an rllm AlgorithmConfig (rllm.trainer.algorithms.config.AlgorithmConfig) or leave it out."
            )
        ambient = algorithm_config.ambient_options()
        options = {**algorithm_config.options_for(entry.name), **options}
        nonfinite = nonfinite or algorithm_config.nonfinite_rewards
        context["algorithm_config"] = algorithm_config
    if traj_groups is not None:
        if len(traj_groups) != len(arrays):
            raise GroupError(
                f"traj_groups has {len(traj_groups)} groups for {len(arrays)} reward groups; pass the "
                "TrajectoryGroups aligned with rewards, one per reward array."
            )
        context["traj_groups"] = list(traj_groups)
    outcome = invoke(entry, batch, options, ambient=ambient, nonfinite_rewards=nonfinite or "error", context=context)
    parts = layout.split(np.asarray(outcome.advantages)) if len(arrays) else []
    return parts, [part.copy() for part in parts]


def _group_arrays(estimator: str, rewards: Sequence[Any]) -> GroupArrays:
    """One 1-D reward array per group; a flat array of rewards or a group of another shape is refused."""
    if isinstance(rewards, np.ndarray) and rewards.ndim == 1 and rewards.dtype != object:
        raise GroupError(
            f"Estimator {estimator!r}: rewards is a flat array of {len(rewards)} rewards, where the list API "
            "takes one reward array per group; pass [group_0_rewards, group_1_rewards, ...], or use "
            "rllm.compute_advantages(name, rewards, group_ids) for flat rewards."
        )
    arrays = [np.asarray(r) for r in rewards]
    for g, array in enumerate(arrays):
        if array.ndim != 1:
            what = "a single number" if array.ndim == 0 else f"an array of shape {array.shape}"
            raise GroupError(
                f"Estimator {estimator!r}: reward group {g} is {what}; each group must be a 1-D list or array "
                "of its rewards ([group_0_rewards, group_1_rewards, ...])."
            )
    return arrays  # converted, or refused, with every door's reward rule where the batch takes them


def _layouts(
    who: str, args: tuple[Any, ...], kwargs: dict[str, Any], seed: tuple[str, ...], today: tuple[str, ...]
) -> AlgorithmConfig | None:
    """Resolve positional arguments of either convention into ``kwargs``; returns the config, if any.

    The second argument is the ``AlgorithmConfig`` in today's convention (then ``today`` names
    the positions after it); anything else follows the seed's positions (``seed``).
    """
    config = kwargs.pop("algorithm_config", None)
    names = seed
    if args and isinstance(args[0], AlgorithmConfig):
        if config is not None:
            raise EstimatorCallError(f"{who}() got algorithm_config both by position and by keyword; pass it once.")
        config, args, names = args[0], args[1:], today
    if len(args) > len(names):
        expected = (
            ", ".join(("rewards", "algorithm_config", *today)) if names is today else ", ".join(("rewards", *seed))
        )
        raise EstimatorCallError(
            f"{who}() takes the positional arguments ({expected}); got {len(args)} after rewards. "
            "Pass an AlgorithmConfig second, or options by keyword."
        )
    for name, value in zip(names, args, strict=False):
        if name in kwargs:
            raise EstimatorCallError(f"{who}() got multiple values for argument {name!r}.")
        kwargs[name] = value
    return config


def _list_callable(entry: EstimatorEntry, label: str) -> Callable[..., tuple[GroupArrays, GroupArrays]]:
    def estimator(rewards: Sequence[Any], *args: Any, **options: Any) -> tuple[GroupArrays, GroupArrays]:
        config = _layouts(estimator.__name__, args, options, (), ())
        traj_groups = options.pop("traj_groups", None)
        return run_on_groups(entry, rewards, options, algorithm_config=config, traj_groups=traj_groups)

    estimator.__name__ = f"{label}_advantages"
    estimator.__doc__ = entry.target.__doc__
    estimator.__wrapped__ = entry.target  # type: ignore[attr-defined]
    return estimator


def get_rllm_adv_estimator(name: EstimatorName) -> Callable[..., tuple[GroupArrays, GroupArrays]]:
    """The estimator registered as ``name``, callable as ``fn(rewards, algorithm_config=None, **options)``.

    Whatever its style, it returns the pair ``(advantages, returns)``, one array per group. It is
    a wrapper that runs the shared pipeline (rLLM returns the registered function itself); the
    registered function is its ``__wrapped__``.
    """
    entry = get_estimator(name)
    return _list_callable(entry, entry.name)


register_adv_estimator = register_rllm_adv_estimator
"""The registration decorator under the name rLLM uses today (the seed's name stays)."""

get_adv_estimator = get_rllm_adv_estimator
"""The lookup under the name rLLM uses today (the seed's name stays)."""


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


def _builtin(name: str) -> Resolved:
    """The built-in plugin's estimator ``name``, even when a plugin or user code took the name over, resolved.

    One lookup of the plugin manager serves the entry and what the call needs besides it.
    """
    manager = get_plugin_manager()
    builtin = [claim for claim in manager.estimators.claims(name) if claim.source.kind == "builtin"]
    return resolve_plugins(builtin[0] if builtin else name, manager=manager)


def _classic(
    name: str,
    who: str,
    rewards: Sequence[Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    seed: tuple[str, ...] = (),
    today: tuple[str, ...] = (),
) -> tuple[GroupArrays, GroupArrays]:
    """One of the classic ``calculate_*`` functions: the built-in ``name`` called in either convention.

    ``seed`` and ``today`` name the positional parameters after ``rewards`` (seed) or after the
    config (today), so both of rLLM's signatures of the function are accepted.
    """
    config = _layouts(who, args, kwargs, seed, today)
    if kwargs.get("epsilon", 0.0) is None:  # epsilon=None, like the config's null: the estimator's own default
        del kwargs["epsilon"]
    traj_groups = kwargs.pop("traj_groups", None)
    resolved = _builtin(name)
    return run_on_groups(
        resolved.entry(), rewards, kwargs, algorithm_config=config, traj_groups=traj_groups, resolved=resolved
    )


def calculate_grpo_advantages(
    rewards: Sequence[np.ndarray], *args: Any, **kwargs: Any
) -> tuple[GroupArrays, GroupArrays]:
    """GRPO per group: ``(r - mean) / (std + epsilon)``; population std, epsilon 1e-6 unless a ``preset`` differs.

    ``calculate_grpo_advantages(rewards, algorithm_config)`` reads ``norm_adv_by_std_in_grpo`` from
    the config; ``calculate_grpo_advantages(rewards, norm_adv_by_std_in_grpo=True, episilon=1e-6)``
    is the seed's form.
    """
    return _classic(
        "grpo", "calculate_grpo_advantages", rewards, args, kwargs, seed=("norm_adv_by_std_in_grpo", "episilon")
    )


def calculate_reinforce_advantages(
    rewards: Sequence[np.ndarray], *args: Any, **kwargs: Any
) -> tuple[GroupArrays, GroupArrays]:
    """REINFORCE: the advantage is the reward (no baseline)."""
    return _classic("reinforce", "calculate_reinforce_advantages", rewards, args, kwargs)


def calculate_reinforce_plus_plus_baseline_advantages(
    rewards: Sequence[np.ndarray], *args: Any, **kwargs: Any
) -> tuple[GroupArrays, GroupArrays]:
    """REINFORCE++ with group-mean baseline, whitened by the std over all groups passed in.

    Forms: ``(rewards, epsilon=1e-6)`` (seed) and ``(rewards, algorithm_config, epsilon=1e-6)``.
    """
    name = "calculate_reinforce_plus_plus_baseline_advantages"
    return _classic("reinforce_plus_plus_baseline", name, rewards, args, kwargs, ("epsilon",), ("epsilon",))


def calculate_prpo_advantages(
    rewards: Sequence[np.ndarray], *args: Any, **kwargs: Any
) -> tuple[GroupArrays, GroupArrays]:
    """PRPO: raw rewards whitened by the mean and population std of all groups passed in (+ epsilon).

    Forms: ``(rewards, algorithm_config, epsilon=1e-6)`` and, without a config, ``(rewards, epsilon=1e-6)``.
    """
    return _classic("prpo", "calculate_prpo_advantages", rewards, args, kwargs, ("epsilon",), ("epsilon",))


def calculate_rloo_advantages(
    rewards: Sequence[np.ndarray], *args: Any, **kwargs: Any
) -> tuple[GroupArrays, GroupArrays]:
    """RLOO (https://arxiv.org/abs/2402.14740): each reward minus the mean of the others in its group."""
    return _classic("rloo", "calculate_rloo_advantages", rewards, args, kwargs)


def _one_group(name: str, rewards: np.ndarray, options: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    resolved = _builtin(name)
    advantages, returns = run_on_groups(resolved.entry(), [rewards], options, resolved=resolved)
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
