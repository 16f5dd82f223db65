"""From episodes to trajectory groups: compact filtering, the grouping hook, reward filling.

The grouping hook decides which rollouts an estimator compares. The default,
:func:`group_by_task_and_role`, puts all rollouts of one task and one trajectory name (role)
in one group; plugins register others under a name (``rllm.grouping_hook``).
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from rllm.config.stages import CompactFilteringConfig
from rllm.errors import ConfigError, DataError, TrainerError, UserCodeExit
from rllm.types import DEFAULT_TRAJ_NAME, Episode, TrajectoryGroup
from rllm.usercode import call_user

GroupingHook = Callable[..., list[TrajectoryGroup]]


def _metadata(episode: Episode) -> dict[str, Any]:
    reason = episode.termination_reason
    return {
        "task_id": episode.task_id,
        "rollout_idx": episode.rollout_idx,
        "episode_id": episode.id,
        "termination_reason": reason.value if reason is not None else None,
        "is_correct": episode.is_correct,
    }


def group_by_task_and_role(
    episodes: Sequence[Episode],
    *,
    impute_missing_names: bool = True,
    default_traj_name: str = DEFAULT_TRAJ_NAME,
    drop_unnamed_traj: bool = False,
) -> list[TrajectoryGroup]:
    """One group per (task id, trajectory name); trajectories without steps are left out.

    A trajectory named ``default_traj_name`` is unnamed. It is left out when
    ``drop_unnamed_traj``; else, when ``impute_missing_names``, named after its position in
    the episode (``default_traj_name_{position}``), so the first unnamed trajectories of all
    rollouts of a task are compared with each other; else all unnamed trajectories of a task
    form one group. These are rLLM's ``TransformConfig`` fields, set with
    ``rllm.grouping_hook_options``. Task ids may contain ':'.
    """
    groups: dict[tuple[str, str], TrajectoryGroup] = {}
    for episode in episodes:
        for position, trajectory in enumerate(episode.trajectories):
            unnamed = trajectory.name == default_traj_name
            if not trajectory.steps or (unnamed and drop_unnamed_traj):
                continue
            role = f"{default_traj_name}_{position}" if unnamed and impute_missing_names else trajectory.name
            key = (episode.task_id, role)
            group = groups.get(key)
            if group is None:
                group = groups[key] = TrajectoryGroup.for_task(episode.task_id, role, [], [])
            group.trajectories.append(trajectory)
            group.metadata.append(_metadata(episode))
    return list(groups.values())


def with_options(hook: GroupingHook, options: Mapping[str, Any], name: str) -> GroupingHook:
    """``hook`` called as ``hook(episodes, **options)``; an option it does not take is a :class:`ConfigError`."""
    if not options:
        return hook
    try:
        parameters = inspect.signature(hook).parameters
    except (TypeError, ValueError):  # a callable Python cannot inspect gets the options as they are
        parameters = None
    if parameters is not None and not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        accepted = [p for p, v in parameters.items() if v.kind is not inspect.Parameter.POSITIONAL_ONLY][1:]
        unknown = sorted(set(options) - set(accepted))
        if unknown:
            raise ConfigError(
                f"rllm.grouping_hook_options.{unknown[0]} is not an option of grouping hook {name!r}; it takes "
                f"{', '.join(accepted) or 'no options'}."
            )
    return functools.partial(hook, **options)


def fill_trajectory_rewards(group: TrajectoryGroup) -> None:
    """Broadcast mode: unset trajectory rewards take their last step's reward, all or none of a group."""
    unset = [t.reward is None for t in group.trajectories]
    if all(unset):
        for trajectory in group.trajectories:
            last = trajectory.steps[-1].reward if trajectory.steps else 0.0
            trajectory.reward = math.nan if last is None else float(last)  # None: unscorable, the policy decides
    elif any(unset):
        position = unset.index(True)
        raise DataError(
            f"Group {group.group_id!r} mixes trajectories with and without a reward (position {position}, "
            f"uid {group.trajectories[position].uid!r} has none). Set trajectory.reward on all of them, "
            "or on none so each takes its last step's reward."
        )


def _size_metrics(groups: Sequence[TrajectoryGroup]) -> dict[str, float]:
    sizes = np.array([len(g.trajectories) for g in groups], dtype=float)
    if not len(sizes):
        return {"grouping/num_groups": 0.0}
    return {
        "grouping/num_groups": float(len(sizes)),
        "grouping/avg_group_size": float(sizes.mean()),
        "grouping/max_group_size": float(sizes.max()),
        "grouping/min_group_size": float(sizes.min()),
    }


def transform_episodes_to_trajectory_groups(
    episodes: Sequence[Episode],
    grouping_hook: GroupingHook,
    compact_filtering: CompactFilteringConfig,
    broadcast: bool = True,
) -> tuple[list[TrajectoryGroup], dict[str, float]]:
    """Mask episodes by termination reason, group the rest with ``grouping_hook``, fill rewards."""
    kept = [episode for episode in episodes if not compact_filtering.should_mask(episode.termination_reason)]
    before = sum(len(ep.trajectories) for ep in episodes)
    name = getattr(grouping_hook, "__qualname__", repr(grouping_hook))
    try:
        groups = call_user(grouping_hook, kept)
    except UserCodeExit as exc:  # sys.exit() in a hook is its failure, not the end of the run
        raise TrainerError(f"Grouping hook {name} {exc.how}; a grouping hook raises an exception to fail.") from None
    if not isinstance(groups, list) or not all(isinstance(g, TrajectoryGroup) for g in groups):
        raise TrainerError(
            f"Grouping hook {name} returned {type(groups).__name__}; it must return a list of rllm.TrajectoryGroup."
        )
    groups = [g for g in groups if g.trajectories]
    if broadcast:
        for group in groups:
            fill_trajectory_rewards(group)
    metrics = {
        "grouping/num_trajs_before_filter": float(before),
        "grouping/num_trajs_after_filter": float(sum(len(g.trajectories) for g in groups)),
        "grouping/episodes_masked": float(len(episodes) - len(kept)),
    }
    metrics.update(_size_metrics(groups))
    return groups, metrics


def check_estimator_roles(groups: Sequence[TrajectoryGroup], estimator_map: Mapping[str, Any]) -> list[str]:
    """Roles named in the estimator map that no group of this batch has (likely a typo)."""
    roles = {group.group_role for group in groups}
    return sorted(role for role in estimator_map if role not in roles)


__all__ = [
    "CompactFilteringConfig",
    "GroupingHook",
    "check_estimator_roles",
    "fill_trajectory_rewards",
    "group_by_task_and_role",
    "transform_episodes_to_trajectory_groups",
    "with_options",
]
