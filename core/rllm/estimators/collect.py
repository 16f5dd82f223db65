"""Advantages for trajectory groups: one estimator call per role, results written to every step."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache, cached_property, partial
from itertools import chain
from numbers import Real
from typing import TYPE_CHECKING, Any

import numpy as np

from rllm.config.names import estimator_name
from rllm.errors import DataError, EstimatorOutputError, InputFieldError, RewardError, RLLMWarning
from rllm.estimators.batch import (
    AdvantageBatch,
    FieldSource,
    FloatArray,
    GroupLayout,
    IndexArray,
    Ragged,
    declared_fields,
    float_rewards,
)
from rllm.estimators.compute import get_estimator
from rllm.estimators.diagnostics import difficulty_metrics
from rllm.estimators.pipeline import Outcome, check_rewards, invoke
from rllm.estimators.state import EstimatorStates
from rllm.plugins.fields import BatchField
from rllm.types import Step, Trajectory, TrajectoryGroup

if TYPE_CHECKING:
    from rllm.config.algorithm import AlgorithmConfig


def _precomputed_advantages(group: TrajectoryGroup) -> list[float]:
    """The per-token advantages a workflow set itself, written back to each step as one value per token.

    A scalar is expanded over the step's response tokens and a step without one gets zeros (as
    rLLM does); a list of the wrong length is replaced by zeros on the step, with a warning. A
    NaN or infinite value, or a value that is neither a number nor a sequence of numbers, is an
    error naming the group.
    """
    values: list[float] = []
    for traj in group.trajectories:
        for index, step in enumerate(traj.steps):
            n_tokens = len(step.response_ids)
            where = f"Group {group.group_id!r}, trajectory {traj.uid!r}, step {index}"
            given = 0.0 if step.advantage is None else step.advantage
            if isinstance(given, Real) and not isinstance(given, bool):
                tokens = [float(given)] * n_tokens
            elif isinstance(given, list | tuple | np.ndarray) and np.ndim(given) == 1:
                try:
                    tokens = [float(a) for a in given]
                except (TypeError, ValueError):
                    raise DataError(f"{where}: step.advantage holds a non-number; give numbers only.") from None
                if len(tokens) != n_tokens:
                    warnings.warn(
                        f"{where} has {len(tokens)} per-token advantages for {n_tokens} response tokens; "
                        "using zeros for that step.",
                        RLLMWarning,
                        stacklevel=4,
                    )
                    tokens = [0.0] * n_tokens
            else:
                raise DataError(
                    f"{where}: step.advantage is a {type(given).__name__}; with use_precomputed_advantage it must "
                    "be a number (spread over the response tokens) or one number per response token."
                )
            if not all(map(math.isfinite, tokens)):
                raise DataError(
                    f"{where} has a NaN or infinite precomputed advantage; fix the workflow that computes it."
                )
            step.advantage = tokens
            values.extend(tokens)
    return values


def _rewards(groups: Sequence[TrajectoryGroup], per_group: list[list[Trajectory]]) -> np.ndarray:
    """Every trajectory's reward; None becomes NaN, which the reward policy handles (error, zero or exclude).

    Anything else that is not a number (a string such as ``"1.5"`` included) is refused, not converted.
    """
    rewards = [t.reward for trajectories in per_group for t in trajectories]
    try:
        values = np.array(rewards)
    except ValueError:  # nested values of different lengths: refused below, naming the trajectory
        values = np.zeros((0, 0))
    except OverflowError:  # an integer too large for a float: named below
        values = np.zeros((0, 0))
    if values.ndim == 1 and values.dtype.kind in "fiub":
        return float_rewards(values)
    for group in groups:
        for position, traj in enumerate(group.trajectories):
            reward = traj.reward
            if reward is not None and not isinstance(reward, Real):
                raise RewardError(
                    f"Trajectory {traj.uid!r} (name {traj.name!r}, position {position}) in group "
                    f"{group.group_id!r} has reward {reward!r}; a reward is a real number (or None when it "
                    "cannot be scored): strings, bytes, complex numbers and other objects are refused."
                )
    return float_rewards([np.nan if r is None else r for r in rewards])


def _steps(trajectories: list[Trajectory], read: Callable[[Step], Any]) -> Ragged | None:
    """One row per trajectory of ``read(step)``; None when some step has no value."""
    counts = np.fromiter((len(t.steps) for t in trajectories), dtype=np.intp, count=len(trajectories))
    values = [read(step) for t in trajectories for step in t.steps]
    if any(v is None for v in values):
        return None
    offsets = np.zeros(len(counts) + 1, dtype=np.intp)
    np.cumsum(counts, out=offsets[1:])
    return Ragged(values=np.asarray(values), offsets=offsets)  # converted, or refused, where the batch takes it


def _per_trajectory(trajectories: list[Trajectory], key: str) -> list[Any] | None:
    values = [t.info.get(key) for t in trajectories]
    return None if any(v is None for v in values) else values


def _components(trajectories: list[Trajectory]) -> np.ndarray | None:
    """``info["reward_components"]``: a sequence, or a mapping whose keys follow the first trajectory's order."""
    values = _per_trajectory(trajectories, "reward_components")
    if values is None:
        return None
    if isinstance(values[0], Mapping):
        keys = list(values[0])
        try:
            return np.array([[v[k] for k in keys] for v in values], dtype=np.float64)
        except (KeyError, TypeError) as exc:
            raise RewardError(
                f"Every trajectory's info['reward_components'] must have the keys {keys}; one lacks {exc}."
            ) from None
    return np.array(values, dtype=np.float64)


def _sources(groups: Sequence[TrajectoryGroup], per_group: list[list[Trajectory]], role: str) -> dict[str, FieldSource]:
    """Where each optional batch field lives on the trajectories; read only if an estimator asks."""

    def flat() -> list[Trajectory]:
        return list(chain.from_iterable(per_group))

    return {
        "response_lengths": lambda: [sum(len(s.response_ids) for s in t.steps) for t in flat()],
        "step_rewards": lambda: _steps(flat(), lambda step: step.reward),
        "step_values": lambda: _steps(flat(), lambda step: step.info.get("value")),
        "baseline_rewards": lambda: _per_trajectory(flat(), "baseline_reward"),
        "reward_components": lambda: _components(flat()),
        "roles": lambda: [role] * len(flat()),
        **{name: partial(_declared, name, field, flat) for name, field in declared_fields().items()},
        "task_ids": lambda: [g.group_task_id for g in groups for _ in g.trajectories],
    }


def _group_ids(groups: list[TrajectoryGroup]) -> list[str]:
    """Group labels for messages (read only when an error names a group)."""
    return [g.group_id for g in groups]


def _declared(name: str, field: BatchField, flat: Callable[[], list[Trajectory]]) -> list[Any]:
    """A plugin-declared batch field, read from every trajectory of the batch; a failing read names both."""
    values = []
    for position, trajectory in enumerate(flat()):
        try:
            values.append(field.read(trajectory))
        except Exception as exc:  # the plugin's reader: any failure is a missing input, not a crash
            from rllm.plugins.manager import get_plugin_manager

            owner = get_plugin_manager().batch_fields.resolve(name).source.describe()
            raise InputFieldError(
                f"Batch field {name!r} ({owner}) could not be read from trajectory {trajectory.uid!r} (name "
                f"{trajectory.name!r}, position {position} of the batch): {type(exc).__name__}: {exc}. Give "
                "every trajectory what the field reads (e.g. its info key), or fix the plugin's read()."
            ) from exc
    return values


def _describer(groups: list[TrajectoryGroup], per_group: list[list[Trajectory]]) -> Callable[[int], str]:
    """Names the trajectory at a batch position (only called to word an error)."""

    def describe(position: int) -> str:
        for group, trajectories in zip(groups, per_group, strict=True):
            if position < len(trajectories):
                traj = trajectories[position]
                return (
                    f"trajectory {traj.uid!r} (name {traj.name!r}, position {position}, reward {traj.reward!r}) "
                    f"in group {group.group_id!r}"
                )
            position -= len(trajectories)
        return f"position {position}"

    return describe


def _reward_metrics(role: str, rewards: np.ndarray, good: np.ndarray | None, metrics: dict[str, float]) -> None:
    """Reward statistics over the rollouts that count; how many did not, when some did not."""
    summarize(f"reward/{role}", rewards if good is None else rewards[good], metrics)
    if good is not None:
        metrics[f"reward/{role}/left_out"] = float(len(good) - np.count_nonzero(good))


_LARGE = 1e150
"""Above this magnitude summaries are computed on scaled values (squares would overflow)."""


def summarize(prefix: str, values: np.ndarray, metrics: dict[str, float], zero_fraction: bool = False) -> None:
    """``{prefix}/mean``, ``std``, ``max`` and ``min`` of ``values`` (and the share of zeros) into ``metrics``."""
    if len(values) == 0:
        return
    top = float(np.max(np.abs(values)))
    scale = top if _LARGE < top < math.inf else 1.0  # near the float limit the mean and std overflow
    scaled = values / scale if scale != 1.0 else values
    metrics[f"{prefix}/mean"] = float(np.mean(scaled)) * scale
    metrics[f"{prefix}/std"] = float(np.std(scaled)) * scale
    metrics[f"{prefix}/max"] = float(np.max(values))
    metrics[f"{prefix}/min"] = float(np.min(values))
    if zero_fraction:
        metrics[f"{prefix}/fraction_zero"] = float(np.count_nonzero(np.abs(values) < 1e-8) / len(values))


def _broadcast(per_group: list[list[Trajectory]], advantages: list[float]) -> int:
    """Set every step's advantage to its trajectory's; returns how many precomputed values it replaced.

    One flat loop over trajectories (chained in C) with the check and the write on the same
    step: this loop is most of the collection's cost, so it does no more per step than that.
    """
    replaced = 0
    for traj, advantage in zip(chain.from_iterable(per_group), advantages, strict=True):
        for step in traj.steps:
            if step.advantage is not None:
                replaced += 1
            step.advantage = advantage
    return replaced


def estimate_role(
    config: AlgorithmConfig,
    role: str,
    batch: AdvantageBatch,
    *,
    context: Mapping[str, Any] | None = None,
    state: Any = None,
) -> Outcome:
    """One role's advantages under ``config`` (its estimator, options and reward policy), through the pipeline.

    The collection step and ``rllm advantages`` both call this, so a run configuration means
    the same thing to both.
    """
    name = estimator_name(config.estimator_for(role))
    return invoke(
        get_estimator(name),
        batch,
        config.options_for(name),
        ambient=config.ambient_options(),
        nonfinite_rewards=config.nonfinite_rewards,
        context=context,
        state=state,
    )


def _divide_by_steps(per_group: list[list[Trajectory]], advantages: FloatArray | Ragged) -> Ragged:
    """``normalize_by_steps``: every step's advantage divided by its trajectory's number of steps.

    A trajectory-level advantage first goes to each of its steps, so the result is always per step.
    """
    trajectories = list(chain.from_iterable(per_group))
    counts = np.fromiter((len(t.steps) for t in trajectories), dtype=np.intp, count=len(trajectories))
    if not isinstance(advantages, Ragged):
        offsets = np.zeros(len(counts) + 1, dtype=np.intp)
        np.cumsum(counts, out=offsets[1:])
        advantages = Ragged(values=np.repeat(advantages, counts), offsets=offsets)
    return per_step_share(advantages)


def per_step_share(advantages: Ragged) -> Ragged:
    """Each row's values divided by the row's length (``normalize_by_steps`` on per-step advantages)."""
    lengths = advantages.lengths
    return advantages.with_values(advantages.values / np.repeat(np.maximum(lengths, 1), lengths))


def _per_step(per_group: list[list[Trajectory]], advantages: Ragged, name: str) -> int:
    """Give every step its own advantage; returns how many precomputed values it replaced."""
    trajectories = list(chain.from_iterable(per_group))
    counts = np.fromiter((len(t.steps) for t in trajectories), dtype=np.intp, count=len(trajectories))
    if not np.array_equal(counts, advantages.lengths):
        raise EstimatorOutputError(
            f"Estimator {name!r} returned per-step advantages whose rows do not match the trajectories' steps."
        )
    values = iter(advantages.values.tolist())
    replaced = 0
    for traj in trajectories:
        for step in traj.steps:
            if step.advantage is not None:
                replaced += 1
            step.advantage = next(values)
    return replaced


RoleBatch = tuple[list[TrajectoryGroup], list[list[Trajectory]]]


def _by_role(
    groups: list[TrajectoryGroup], check_precomputed: bool, collect_advantage: bool, precomputed: dict[str, list[float]]
) -> dict[str, RoleBatch]:
    """Groups (and their trajectory lists) per role; precomputed-advantage groups go to ``precomputed``."""
    roles: list[str] = []
    per_group: list[list[Trajectory]] = []
    add_role, add_trajectories = roles.append, per_group.append
    for group in groups:  # one visit per group object: at this scale each visit is a cache miss
        role = group.role  # set by TrajectoryGroup.for_task; the property parses group_id otherwise
        add_role(group.group_role if role is None else role)
        add_trajectories(group.trajectories)
    if roles and not check_precomputed and all(per_group) and roles.count(roles[0]) == len(roles):
        return {roles[0]: (list(groups), per_group)}  # the common case: one role, no empty group
    by_role: dict[str, RoleBatch] = {}
    for group, role, trajectories in zip(groups, roles, per_group, strict=True):
        if check_precomputed and any(step.advantage is not None for traj in trajectories for step in traj.steps):
            if collect_advantage:
                precomputed.setdefault(role, []).extend(_precomputed_advantages(group))
            continue
        if not trajectories:
            warnings.warn(f"Group {group.group_id!r} has no trajectories; skipped.", RLLMWarning, stacklevel=3)
            continue
        role_groups, role_trajectories = by_role.setdefault(role, ([], []))
        role_groups.append(group)
        role_trajectories.append(trajectories)
    return by_role


def _check_distinct(by_role: dict[str, RoleBatch]) -> None:
    """Refuse a trajectory object that sits in two groups: its reward would count twice, its steps be written twice."""
    seen: set[int] = set()
    total = 0
    for _, per_group in by_role.values():
        for trajectories in per_group:
            seen.update(map(id, trajectories))
            total += len(trajectories)
    if len(seen) == total:
        return
    owner: dict[int, str] = {}
    for groups, per_group in by_role.values():
        for group, trajectories in zip(groups, per_group, strict=True):
            for traj in trajectories:
                first = owner.setdefault(id(traj), group.group_id)
                if first is not group.group_id:
                    raise DataError(
                        f"Trajectory {traj.uid!r} is in two groups, {first!r} and {group.group_id!r}; its reward "
                        "would count twice. Put each trajectory object in one group (copy it if you mean two)."
                    )


@dataclass
class RoleAdvantages:
    """One role's advantages in batch order, for backends that take arrays rather than Step objects."""

    per_group: list[list[Trajectory]]
    """The role's trajectories, group by group, in batch order."""
    advantages: FloatArray | Ragged
    """One per trajectory, or (per-step estimators) one row of step advantages per trajectory."""
    verify: Callable[[], None] = lambda: None
    """Refuses a trajectory object found in two groups; run before the arrays are first used."""

    @cached_property
    def trajectories(self) -> list[Trajectory]:
        """The trajectories in batch order: ``advantages[i]`` belongs to ``trajectories[i]``."""
        self.verify()
        return list(chain.from_iterable(self.per_group))

    def per_step(self) -> tuple[FloatArray, IndexArray]:
        """Every step's advantage, trajectory by trajectory, and the index of each step's trajectory."""
        self.verify()
        if isinstance(self.advantages, Ragged):
            counts = self.advantages.lengths
            values = self.advantages.values
        else:
            trajectories = self.trajectories
            counts = np.fromiter((len(t.steps) for t in trajectories), dtype=np.intp, count=len(trajectories))
            values = np.repeat(self.advantages, counts)
        return values, np.repeat(np.arange(len(counts)), counts)


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

    # A trajectory object in two groups would count twice. Checking every object costs about half of
    # the bare loop, so it runs only when it can matter: when writing finds steps already set (which a
    # repeated trajectory always causes), or when a backend first reads the arrays.
    verify = cache(partial(_check_distinct, by_role))
    collected = Collected(metrics={})
    metrics = collected.metrics
    advantages_by_role: dict[str, np.ndarray] = {}
    for role, (role_groups, per_group) in by_role.items():
        layout = GroupLayout.from_sizes(list(map(len, per_group)), partial(_group_ids, role_groups))
        rewards = _rewards(role_groups, per_group)
        batch = AdvantageBatch(
            rewards, layout, sources=_sources(role_groups, per_group, role), describe=_describer(role_groups, per_group)
        )
        if not collect_advantage:
            zeroed = check_rewards(batch, config.nonfinite_rewards)
            good = None if zeroed is None else np.isfinite(rewards)
            _reward_metrics(role, rewards, good, metrics)
            continue
        name = estimator_name(config.estimator_for(role))
        entry = get_estimator(name)
        context = {"algorithm_config": config, "traj_groups": role_groups}
        state = None if states is None else states.get(name, entry.target, role)
        outcome = estimate_role(config, role, batch, context=context, state=state)
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
