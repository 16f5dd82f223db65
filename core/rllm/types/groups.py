"""Trajectory groups: all rollouts of one task and one role, the unit advantage estimators compare within.

The group id keeps its parts explicitly: a task id or a role may contain ``':'`` and still
round-trip, because the parts are stored rather than re-parsed from the joined string.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rllm.types.episodes import Trajectory

__all__ = ["DEFAULT_ROLE", "TrajectoryGroup"]

DEFAULT_ROLE = "all_groups"
"""Role of a group whose id names no role."""


@dataclass
class TrajectoryGroup:
    """Trajectories that an estimator compares with each other: one task, one role.

    ``group_id`` is ``"{task_id}:{role}"``. Build groups with :meth:`for_task` (or pass
    ``task_id`` and ``role``) so both parts survive ids that contain ':'. A group built from a
    bare ``group_id`` derives its task id as rLLM does (``"t:solver"`` gives ``"t"``; a task id
    in ``metadata`` that prefixes the id wins) and its role from the rest; an id with no role
    or an empty one (``"t:"``) has the role ``all_groups``.
    """

    trajectories: list[Trajectory] = field(default_factory=list)
    group_id: str = ""
    metadata: list[dict[str, Any]] = field(default_factory=list)
    task_id: str | None = None
    role: str | None = None
    weight_version: int = 0
    """Version of the policy weights the group's rollouts were sampled with."""

    def __post_init__(self) -> None:
        if self.task_id is not None and self.role is not None and not self.group_id:
            self.group_id = f"{self.task_id}:{self.role}"
        if self.task_id is None and self.group_id:
            self.task_id = self._split()[0]

    @classmethod
    def for_task(
        cls,
        task_id: str,
        role: str,
        trajectories: list[Trajectory],
        metadata: list[dict[str, Any]] | None = None,
    ) -> TrajectoryGroup:
        return cls(
            trajectories=trajectories,
            group_id=f"{task_id}:{role}",
            metadata=metadata if metadata is not None else [],
            task_id=task_id,
            role=role,
        )

    def _split(self) -> tuple[str, str]:
        """(task id, role) of ``group_id``: a known task id prefix first, else the first ':'."""
        known = self.task_id
        if known is None and self.metadata:
            known = self.metadata[0].get("task_id")
        if known is not None and self.group_id.startswith(f"{known}:"):
            task, role = known, self.group_id[len(known) + 1 :]
        else:
            task, _, role = self.group_id.partition(":")
        return task, role or DEFAULT_ROLE

    @property
    def group_role(self) -> str:
        return self.role if self.role is not None else self._split()[1]

    @property
    def group_task_id(self) -> str:
        return self.task_id if self.task_id is not None else self._split()[0]
