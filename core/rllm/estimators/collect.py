"""Advantages for trajectory groups: one estimator call per role, results broadcast to every step."""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Sequence
from itertools import chain
import numpy as np

from rllm.config.algorithm import AlgorithmConfig, estimator_name
from rllm.errors import RewardError, RLLMWarning
from rllm.estimators.batch import AdvantageBatch, GroupLayout
from rllm.estimators.call import run_estimator
from rllm.estimators.compute import get_estimator
from rllm.types import Trajectory, TrajectoryGroup


def _precomputed_advantages(group: TrajectoryGroup) -> list[float]:
    """Per-token advantages a workflow set itself; a step without one gets 0."""
    values: list[float] = []
    for traj in group.trajectories:
        for step in traj.steps:
            n_tokens = len(step.response_ids)
            if step.advantage is None:
                step.advantage = 0.0
            if isinstance(step.advantage, list | tuple | np.ndarray):
                if len(step.advantage) != n_tokens:
                    warnings.warn(
                        f"Group {group.group_id!r}, trajectory {traj.uid!r}: a step has {len(step.advantage)} "
                        f"per-token advantages for {n_tokens} response tokens; using zeros for that step.",
                        RLLMWarning,
                        stacklevel=4,
                    )
                    values.extend([0.0] * n_tokens)
                else:
                    values.extend(float(a) for a in step.advantage)
            else:
                values.extend([float(step.advantage)] * n_tokens)
    return values


def _missing_reward(group: TrajectoryGroup) -> None:
    for position, traj in enumerate(group.trajectories):
        if traj.reward is None:
            raise RewardError(
                f"Trajectory {traj.uid!r} (name {traj.name!r}, position {position}) in group "
                f"{group.group_id!r} has no reward. Set trajectory.reward for every trajectory of the "
                "group (the grouping hook copies the last step's reward when all are unset)."
            )


def _rewards(groups: Sequence[TrajectoryGroup], count: int) -> np.ndarray:
    trajectories = chain.from_iterable(g.trajectories for g in groups)
    try:
        return np.fromiter((t.reward for t in trajectories), dtype=np.float64, count=count)
    except TypeError:
        for group in groups:
            _missing_reward(group)
        raise


def _nonfinite_groups(
    rewards: np.ndarray, layout: GroupLayout, groups: Sequence[TrajectoryGroup], policy: str
) -> np.ndarray | None:
    """Groups holding NaN/inf rewards: an error naming the first, or (policy 'zero') a mask of them."""
    bad = ~np.isfinite(rewards)
    if not bad.any():
        return None
    bad_groups = np.zeros(layout.n_groups, dtype=bool)
    bad_groups[layout.group_index[bad]] = True
    first = int(np.flatnonzero(bad_groups)[0])
    group = groups[first]
    position = int(np.flatnonzero(bad[layout.starts[first] : layout.starts[first] + layout.sizes[first]])[0])
    traj = group.trajectories[position]
    if policy == "error":
        raise RewardError(
            f"Trajectory {traj.uid!r} (position {position}) in group {group.group_id!r} has reward "
            f"{traj.reward!r}; rewards must be finite. Fix the reward function, or set "
            "rllm.algorithm.nonfinite_rewards=zero to give such groups zero advantage."
        )
    names = ", ".join(repr(groups[g].group_id) for g in np.flatnonzero(bad_groups)[:5])
    warnings.warn(
        f"{int(bad_groups.sum())} group(s) have NaN or infinite rewards and get zero advantage "
        f"(nonfinite_rewards=zero): {names}.",
        RLLMWarning,
        stacklevel=4,
    )
    return bad_groups


def _summary(prefix: str, values: np.ndarray, metrics: dict[str, float], zero_fraction: bool = False) -> None:
    if len(values) == 0:
        return
    metrics[f"{prefix}/mean"] = float(np.mean(values))
    metrics[f"{prefix}/std"] = float(np.std(values))
    metrics[f"{prefix}/max"] = float(np.max(values))
    metrics[f"{prefix}/min"] = float(np.min(values))
    if zero_fraction:
        metrics[f"{prefix}/fraction_zero"] = float(np.count_nonzero(np.abs(values) < 1e-8) / len(values))


def _broadcast(trajectories: Iterable[Trajectory], advantages: list[float]) -> int:
    """Set every step's advantage to its trajectory's; returns how many precomputed values it replaced."""
    replaced = 0
    for traj, advantage in zip(trajectories, advantages, strict=True):
        for step in traj.steps:
            if step.advantage is not None:
                replaced += 1
            step.advantage = advantage
    return replaced


def collect_reward_and_advantage_from_trajectory_groups(
    groups: list[TrajectoryGroup],
    algorithm_config: AlgorithmConfig,
    collect_advantage: bool = True,
) -> dict[str, float]:
    """Compute advantages for ``groups`` (one estimator call per role) and return reward/advantage metrics.

    Each trajectory's advantage is written to every one of its steps. With
    ``use_precomputed_advantage``, groups whose steps already carry advantages keep them
    (missing ones become 0). With ``collect_advantage=False`` only reward metrics are made.
    """
    config = algorithm_config
    by_role: dict[str, list[TrajectoryGroup]] = {}
    precomputed: dict[str, list[float]] = {}
    for group in groups:
        role = group.group_role
        if config.use_precomputed_advantage and any(
            step.advantage is not None for traj in group.trajectories for step in traj.steps
        ):
            if collect_advantage:
                precomputed.setdefault(role, []).extend(_precomputed_advantages(group))
            continue
        if not group.trajectories:
            warnings.warn(f"Group {group.group_id!r} has no trajectories; skipped.", RLLMWarning, stacklevel=2)
            continue
        by_role.setdefault(role, []).append(group)

    metrics: dict[str, float] = {}
    advantages_by_role: dict[str, np.ndarray] = {}
    for role, role_groups in by_role.items():
        sizes = [len(g.trajectories) for g in role_groups]
        rewards = _rewards(role_groups, sum(sizes))
        layout = GroupLayout.from_sizes(sizes)
        bad_groups = _nonfinite_groups(rewards, layout, role_groups, config.nonfinite_rewards)
        good = None if bad_groups is None else ~layout.spread(bad_groups)
        if good is not None:
            rewards = np.where(good, rewards, 0.0)
        _summary(f"reward/{role}", rewards if good is None else rewards[good], metrics)
        if not collect_advantage:
            continue
        name = estimator_name(config.estimator_for(role))
        entry = get_estimator(name)
        batch = AdvantageBatch(rewards, layout)
        advantages = run_estimator(entry, batch, config.options_for(name), config.ambient_options())
        if good is not None:
            advantages = np.where(good, advantages, 0.0)
        advantages_by_role[role] = advantages if good is None else advantages[good]
        values = advantages.tolist()
        replaced = _broadcast(chain.from_iterable(g.trajectories for g in role_groups), values)
        if replaced:
            warnings.warn(
                f"[role={role}] {replaced} step(s) carried precomputed advantages; they were overwritten "
                f"with {name!r} advantages because use_precomputed_advantage is false.",
                RLLMWarning,
                stacklevel=2,
            )
    if collect_advantage:
        for role, values in precomputed.items():
            advantages_by_role[role] = np.concatenate([advantages_by_role.get(role, np.zeros(0)), values])
        for role, values in advantages_by_role.items():
            _summary(f"advantage/{role}", values, metrics, zero_fraction=True)
    return metrics

