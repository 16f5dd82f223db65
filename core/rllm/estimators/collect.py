"""Advantages for trajectory groups: one estimator call per role, results written to every step.

Reading the groups into batches is :mod:`rllm.estimators.gather`, writing the advantages back
:mod:`rllm.estimators.writeback`, and the summaries :mod:`rllm.estimators.metrics`; the names
other modules import from here stay importable.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache, partial
from typing import TYPE_CHECKING, Any

import numpy as np

from rllm.config.names import estimator_name
from rllm.errors import RLLMWarning
from rllm.estimators.batch import AdvantageBatch
from rllm.estimators.compute import get_estimator
from rllm.estimators.diagnostics import difficulty_metrics
from rllm.estimators.gather import _by_role, _check_distinct, _describer, _group_ids, _rewards, _sources
from rllm.estimators.layout import GroupLayout
from rllm.estimators.metrics import _reward_metrics, summarize
from rllm.estimators.pipeline import Outcome, check_rewards, invoke
from rllm.estimators.ragged import Ragged
from rllm.estimators.resolution import resolve_plugins
from rllm.estimators.state import EstimatorStates
from rllm.estimators.writeback import RoleAdvantages, _broadcast, _divide_by_steps, _per_step, per_step_share
from rllm.plugins.registry import EstimatorEntry
from rllm.types import TrajectoryGroup

if TYPE_CHECKING:
    from rllm.config.algorithm import AlgorithmConfig

__all__ = [
    "Collected",
    "RoleAdvantages",
    "collect_advantages",
    "collect_reward_and_advantage_from_trajectory_groups",
    "estimate_role",
    "per_step_share",
    "summarize",
]


def estimate_role(
    config: AlgorithmConfig,
    role: str,
    batch: AdvantageBatch,
    *,
    context: Mapping[str, Any] | None = None,
    state: Any = None,
    entry: EstimatorEntry | None = None,
) -> Outcome:
    """One role's advantages under ``config`` (its estimator, options and reward policy), through the pipeline.

    The collection step and ``rllm advantages`` both call this, so a run configuration means
    the same thing to both. ``entry`` is the role's estimator as the caller's door resolved it
    (default: looked up now).
    """
    name = estimator_name(config.estimator_for(role))
    return invoke(
        entry if entry is not None else get_estimator(name),
        batch,
        config.options_for(name),
        ambient=config.ambient_options(),
        nonfinite_rewards=config.nonfinite_rewards,
        context=context,
        state=state,
    )


@dataclass
class Collected:
    """What the collection step produced: metrics, and each role's advantages as arrays."""

    metrics: dict[str, float]
    roles: dict[str, RoleAdvantages] = field(default_factory=dict)


def collect_advantages(
    groups: list[TrajectoryGroup],
    algorithm_config: AlgorithmConfig,
    *,
    write_steps: bool = True,
    collect_advantage: bool = True,
    states: EstimatorStates | None = None,
) -> Collected:
    """Advantages for ``groups`` (one estimator call per role) as arrays, plus reward/advantage metrics.

    With ``write_steps`` (what :func:`collect_reward_and_advantage_from_trajectory_groups`
    does) every step also gets its advantage in ``step.advantage``; a backend that reads
    :attr:`Collected.roles` instead can skip that, which is most of the step's cost.
    Groups whose advantages were precomputed (``use_precomputed_advantage``) keep them on
    their steps and are not in ``roles``. ``states`` holds the run's stateful estimators'
    states (a trainer passes its own; without it each such estimator starts afresh).
    With ``normalize_by_steps`` every estimator's advantages are divided, step by step, by
    the number of steps of their trajectory.
    """
    config = algorithm_config
    precomputed: dict[str, list[float]] = {}
    by_role = _by_role(groups, config.use_precomputed_advantage, collect_advantage, precomputed)
    names = dict.fromkeys(estimator_name(config.estimator_for(role)) for role in by_role) if collect_advantage else {}
    resolved = resolve_plugins(*names)  # the one lookup of this call: every role's estimator, kernels, fields

    # A trajectory object in two groups would count twice. Checking every object costs about half of
    # the bare loop, so it runs only when it can matter: when writing finds steps already set (which a
    # repeated trajectory always causes), or when a backend first reads the arrays.
    verify = cache(partial(_check_distinct, by_role))
    collected = Collected(metrics={})
    metrics = collected.metrics
    advantages_by_role: dict[str, np.ndarray] = {}
    for role, (role_groups, per_group) in by_role.items():
        layout = GroupLayout.from_sizes(
            list(map(len, per_group)), partial(_group_ids, role_groups), kernels=resolved.kernels
        )
        rewards = _rewards(role_groups, per_group)
        batch = AdvantageBatch(
            rewards,
            layout,
            sources=_sources(role_groups, per_group, role, resolved),
            describe=_describer(role_groups, per_group),
            fields=resolved.fields,
        )
        if not collect_advantage:
            zeroed = check_rewards(batch, config.nonfinite_rewards)
            good = None if zeroed is None else np.isfinite(rewards)
            _reward_metrics(role, rewards, good, metrics)
            continue
        name = estimator_name(config.estimator_for(role))
        entry = resolved.entry(name)
        context = {"algorithm_config": config, "traj_groups": role_groups}
        state = None if states is None else states.get(name, entry.target, role)
        outcome = estimate_role(config, role, batch, context=context, state=state, entry=entry)
        advantages = outcome.advantages
        if config.normalize_by_steps:
            advantages = _divide_by_steps(per_group, advantages)
        collected.roles[role] = RoleAdvantages(per_group, advantages, verify)
        good = outcome.counted(layout)
        skipped = outcome.zeroed_groups
        if outcome.excluded is not None:
            skipped = np.zeros(layout.n_groups, dtype=bool)  # groups with an unscorable rollout: spread unknown
            skipped[layout.group_index[outcome.excluded]] = True
        _reward_metrics(role, rewards, good, metrics)
        metrics.update(difficulty_metrics(role, rewards, layout, skipped))
        replaced = 0
        if isinstance(advantages, Ragged):
            if write_steps:
                replaced = _per_step(per_group, advantages, name)
            values = advantages.values if good is None else advantages.values[advantages.expand(good)]
        else:
            if write_steps:
                replaced = _broadcast(per_group, advantages.tolist())
            values = advantages if good is None else advantages[good]
        advantages_by_role[role] = values
        if replaced:
            verify()
            warnings.warn(
                f"[role={role}] {replaced} step(s) carried precomputed advantages; they were overwritten "
                f"with {name!r} advantages because use_precomputed_advantage is false.",
                RLLMWarning,
                stacklevel=2,
            )
    if collect_advantage:
        for role, tokens in precomputed.items():
            advantages_by_role[role] = np.concatenate([advantages_by_role.get(role, np.zeros(0)), tokens])
        for role, values in advantages_by_role.items():
            summarize(f"advantage/{role}", values, metrics, zero_fraction=True)
    return collected


def collect_reward_and_advantage_from_trajectory_groups(
    groups: list[TrajectoryGroup],
    algorithm_config: AlgorithmConfig,
    collect_advantage: bool = True,
) -> dict[str, float]:
    """Compute advantages for ``groups`` (one estimator call per role) and return reward/advantage metrics.

    Each trajectory's advantage is written to every one of its steps; an estimator that
    scores steps (it returns a :class:`Ragged`, e.g. ``reinforce_plus_plus``) gives every
    step its own. Optional estimator inputs (step rewards, response lengths,
    ``trajectory.info["baseline_reward"]``, ...) are read from the trajectories only when
    the estimator asks for them. With
    ``use_precomputed_advantage``, groups whose steps already carry advantages keep them
    (missing ones become 0). With ``collect_advantage=False`` only reward metrics are made.
    :func:`collect_advantages` returns the same advantages as arrays as well.
    """
    return collect_advantages(groups, algorithm_config, collect_advantage=collect_advantage).metrics
