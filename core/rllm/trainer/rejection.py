"""Rejection sampling: which groups reach the update, and accumulation across batches.

Groups smaller than ``min_trajs_per_group`` are always dropped (a group of one has no
baseline to compare against). Then, by ``mode``:

``none``
    everything else is kept;
``batch``
    only groups of tasks that this batch solved partially (some rollouts right, some wrong)
    are kept, since all-right or all-wrong groups carry no group-relative signal;
``episode``
    groups are accumulated across batches until at least ``min_partial_solve_tasks``
    partially solved tasks have been seen, then everything accumulated is released at once;
``group``
    rLLM's name for the size filter alone: as ``none``.

The settings are :class:`rllm.config.stages.RejectionSamplingConfig` (rLLM's shape, one class
for the documented import paths and the trainer).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from rllm.config.stages import RejectionSamplingConfig
from rllm.errors import RLLMWarning
from rllm.types import Episode, TrajectoryGroup


@dataclass
class RejectionSamplingState:
    """What ``episode`` mode has accumulated but not yet released; checkpointed with the trainer."""

    groups: list[TrajectoryGroup] = field(default_factory=list)
    episodes: list[Episode] = field(default_factory=list)
    partial_tasks: int = 0
    batches: int = 0


def solve_counts(episodes: Sequence[Episode]) -> dict[str, str]:
    """Each task id's status in this batch: ``none``, ``partial`` or ``all`` of its rollouts correct."""
    outcomes: dict[str, list[bool]] = defaultdict(list)
    for episode in episodes:
        outcomes[episode.task_id].append(bool(episode.is_correct))
    return {
        task: "all" if all(results) else "partial" if any(results) else "none" for task, results in outcomes.items()
    }


def episodes_of(groups: Sequence[TrajectoryGroup], episodes: Sequence[Episode]) -> list[Episode]:
    """The episodes restricted to the trajectories that survived; episodes left empty are dropped.

    An episode that lost none is returned as it is: only a restricted one needs a copy (copying
    every episode of every batch cost more than the filter itself).
    """
    kept = {id(traj) for group in groups for traj in group.trajectories}
    out = []
    for episode in episodes:
        trajectories = [t for t in episode.trajectories if id(t) in kept]
        if not trajectories:
            continue
        whole = len(trajectories) == len(episode.trajectories)
        out.append(episode if whole else dataclasses.replace(episode, trajectories=trajectories))
    return out


def apply_rejection_sampling_and_filtering(
    episodes: Sequence[Episode],
    groups: Sequence[TrajectoryGroup],
    config: RejectionSamplingConfig,
    state: RejectionSamplingState,
) -> tuple[list[TrajectoryGroup], list[Episode], dict[str, float]]:
    """Filter ``groups`` (and ``episodes`` to match); in ``episode`` mode, accumulate in ``state``."""
    big_enough = [g for g in groups if len(g.trajectories) >= config.min_trajs_per_group]
    if groups and not big_enough:
        largest = max(len(g.trajectories) for g in groups)
        warnings.warn(
            f"rejection sampling dropped every trajectory group: the largest has {largest} trajectories and "
            f"rllm.rejection_sample.min_trajs_per_group={config.min_trajs_per_group}. Nothing is trained on "
            "this batch. Raise rllm.rollout.n or lower min_trajs_per_group.",
            RLLMWarning,
            stacklevel=2,
        )
    status = solve_counts(episodes)
    metrics = {
        "rejection/solve_none": float(sum(s == "none" for s in status.values())),
        "rejection/solve_partial": float(sum(s == "partial" for s in status.values())),
        "rejection/solve_all": float(sum(s == "all" for s in status.values())),
        "rejection/groups_dropped_small": float(len(groups) - len(big_enough)),
    }
    if config.mode == "batch":
        big_enough = [g for g in big_enough if status.get(g.group_task_id) == "partial"]
    kept_episodes = episodes_of(big_enough, episodes)
    if config.mode != "episode":
        metrics["rejection/groups_kept"] = float(len(big_enough))
        return big_enough, kept_episodes, metrics

    state.groups.extend(big_enough)
    state.episodes.extend(kept_episodes)
    state.partial_tasks += int(metrics["rejection/solve_partial"])
    state.batches += 1
    metrics["rejection/accumulated_groups"] = float(len(state.groups))
    metrics["rejection/accumulated_partial_tasks"] = float(state.partial_tasks)
    metrics["rejection/accumulated_batches"] = float(state.batches)
    if state.partial_tasks < config.min_partial_solve_tasks:
        metrics["rejection/released"] = 0.0
        return [], [], metrics
    released_groups, released_episodes = state.groups, state.episodes
    state.groups, state.episodes, state.partial_tasks, state.batches = [], [], 0, 0
    metrics["rejection/released"] = 1.0
    metrics["rejection/groups_kept"] = float(len(released_groups))
    return released_groups, released_episodes, metrics
