"""The anchor-state grouping hook of GiGPO (``rllm.grouping_hook: anchor_states``).

It forms the task-and-role groups (GiGPO's episode groups) and numbers each step's environment
state within its group, so that the ``gigpo`` estimator compares the steps taken from one state
(:mod:`rllm_builtin.estimators.gigpo`).
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from typing import Any

from rllm.errors import DataError, RLLMWarning
from rllm.trainer import group_by_task_and_role
from rllm.types import DEFAULT_TRAJ_NAME, Episode, Step, TrajectoryGroup
from rllm_builtin.estimators.gigpo import ANCHOR_INFO, HOOK_NAME


def _state(step: Step, state_key: str) -> str | None:
    """The step's state in a canonical form (equal states, equal strings), or None when it has none."""
    value = step.info.get(state_key)
    where = f"step.info[{state_key!r}]"
    if value is None:
        value, where = step.observation, "step.observation"
    if value is None:
        return None
    try:
        return json.dumps(value, sort_keys=True, default=_plain)
    except (TypeError, ValueError):
        raise DataError(
            f"{where} holds a {type(value).__name__} with no JSON form, so its state cannot be compared; set "
            f"step.info[{state_key!r}] to plain data (a string, number, or list or dict of them)."
        ) from None


def _plain(value: Any) -> Any:
    """numpy arrays and scalars as lists and numbers; anything else has no JSON form."""
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        return tolist()
    raise TypeError(type(value).__name__)


def number_anchor_states(group: TrajectoryGroup, state_key: str = "state_key") -> bool:
    """Write each step's state number (equal states, equal numbers) to ``step.info["anchor_state"]``.

    A step without a state gets a number of its own. Returns whether any step of the group had a state.
    """
    numbers: dict[str, int] = {}
    fresh = 0
    found = False
    for trajectory in group.trajectories:
        for step in trajectory.steps:
            key = _state(step, state_key)
            if key is None:
                number = fresh
            else:
                found = True
                number = numbers.setdefault(key, fresh)
            if number == fresh:
                fresh += 1
            step.info[ANCHOR_INFO] = number
    return found


def group_by_anchor_state(
    episodes: Sequence[Episode],
    *,
    state_key: str = "state_key",
    impute_missing_names: bool = True,
    default_traj_name: str = DEFAULT_TRAJ_NAME,
    drop_unnamed_traj: bool = False,
) -> list[TrajectoryGroup]:
    """The task-and-role groups (the episode groups), each step labelled with its anchor state.

    A step's state is ``step.info[state_key]`` when the workflow set it, else ``step.observation``;
    equal values (compared by their JSON form) are one state. A group none of whose steps has a
    state falls back to episode groups, with a warning naming it. The other options are
    ``task_and_role``'s.
    """
    groups = group_by_task_and_role(
        episodes,
        impute_missing_names=impute_missing_names,
        default_traj_name=default_traj_name,
        drop_unnamed_traj=drop_unnamed_traj,
    )
    for group in groups:
        if not number_anchor_states(group, state_key):
            warnings.warn(
                f"Grouping hook {HOOK_NAME!r}: group {group.group_id!r} has no state keys (no step sets "
                f"info[{state_key!r}] or an observation); it falls back to episode groups (step-level advantage 0).",
                RLLMWarning,
                stacklevel=2,
            )
    return groups
