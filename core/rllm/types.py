"""The data model that rollouts, estimators and trainers exchange.

An :class:`Episode` is one rollout of one task; it holds one :class:`Trajectory` per
agent role, each made of :class:`Step` objects. Trainers regroup trajectories into
:class:`TrajectoryGroup` objects (all rollouts of one task and one role), which is the
unit advantage estimators compare within.

Identifiers keep their parts explicitly: a task id or a role may contain ``':'`` and still
round-trip, because the parts are stored rather than re-parsed from the joined string.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from rllm.errors import DataError

DEFAULT_ROLE = "all_groups"
"""Role of a group whose id names no role."""

DEFAULT_TRAJ_NAME = "default_traj_name"
"""Name of a trajectory its workflow did not name."""


class TerminationReason(str, Enum):
    """Why an episode ended."""

    MAX_PROMPT_LENGTH_EXCEEDED = "max_prompt_length_exceeded"
    MAX_RESPONSE_LENGTH_EXCEEDED = "max_response_length_exceeded"
    ENV_DONE = "env_done"
    MAX_TURNS_EXCEEDED = "max_turns_exceeded"
    TIMEOUT = "timeout"
    UNKNOWN = "unknown"
    ERROR = "error"


@dataclass
class Step:
    """One model call: what it saw, what it produced, and how it was scored."""

    prompt_ids: list[int] = field(default_factory=list)
    response_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    chat_completions: list[dict[str, Any]] = field(default_factory=list)
    observation: Any = None
    thought: str = ""
    action: Any = None
    model_response: str = ""
    info: dict[str, Any] = field(default_factory=dict)
    reward: float = 0.0
    done: bool = False
    mc_return: float = 0.0
    advantage: float | list[float] | None = None
    """A scalar (broadcast to every token) or one value per response token."""

    def __post_init__(self) -> None:
        if self.logprobs and len(self.logprobs) != len(self.response_ids):
            raise DataError(
                f"Step has {len(self.logprobs)} logprobs for {len(self.response_ids)} response tokens; "
                "give one logprob per response token, or none."
            )


@dataclass
class Trajectory:
    """The steps one role took in one episode, with the trajectory-level reward."""

    uid: str = field(default_factory=lambda: str(uuid.uuid4()))
    name: str = DEFAULT_TRAJ_NAME
    task: Any = None
    steps: list[Step] = field(default_factory=list)
    reward: float | None = None
    info: dict[str, Any] = field(default_factory=dict)


def split_rollout_id(episode_id: str) -> tuple[str, int]:
    """Split ``"{task_id}:{rollout_idx}"`` at its last ':' so task ids may contain ':'."""
    task_id, sep, index = episode_id.rpartition(":")
    if not sep or not index.lstrip("-").isdigit():
        raise DataError(
            f"Episode id {episode_id!r} is not of the form '{{task_id}}:{{rollout_idx}}' with an integer rollout index."
        )
    return task_id, int(index)


@dataclass
class Episode:
    """One rollout of one task, possibly with several roles (trajectories)."""

    id: str = ""
    task: Any = None
    termination_reason: TerminationReason | None = None
    is_correct: bool = False
    trajectories: list[Trajectory] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def task_id(self) -> str:
        return split_rollout_id(self.id)[0]

    @property
    def rollout_idx(self) -> int:
        return split_rollout_id(self.id)[1]


@dataclass
class TrajectoryGroup:
    """Trajectories that an estimator compares with each other: one task, one role.

    ``group_id`` is ``"{task_id}:{role}"``. Build groups with :meth:`for_task` (or pass
    ``task_id`` and ``role``) so both parts survive ids that contain ':'; a group built from
    a bare ``group_id`` takes its task id from ``metadata`` when it can, and otherwise
    splits at the first ':'.
    """

    trajectories: list[Trajectory] = field(default_factory=list)
    group_id: str = ""
    metadata: list[dict[str, Any]] = field(default_factory=list)
    task_id: str | None = None
    role: str | None = None

    def __post_init__(self) -> None:
        if self.task_id is not None and self.role is not None and not self.group_id:
            self.group_id = f"{self.task_id}:{self.role}"

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

    @property
    def group_role(self) -> str:
        if self.role is not None:
            return self.role
        known_task = self.task_id
        if known_task is None and self.metadata:
            known_task = self.metadata[0].get("task_id")
        if known_task is not None and self.group_id.startswith(f"{known_task}:"):
            return self.group_id[len(known_task) + 1 :]
        _, sep, role = self.group_id.partition(":")
        return role if sep else DEFAULT_ROLE

    @property
    def group_task_id(self) -> str:
        if self.task_id is not None:
            return self.task_id
        role = self.group_role
        if role == DEFAULT_ROLE and ":" not in self.group_id:
            return self.group_id
        return self.group_id[: len(self.group_id) - len(role) - 1]
