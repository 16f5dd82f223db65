"""Steps, trajectories and episodes: the records a rollout makes, and what estimators and trainers read.

An :class:`Episode` is one rollout of one task; it holds one :class:`Trajectory` per
agent role, each made of :class:`Step` objects. An episode id keeps its parts explicitly: a
task id may contain ``':'`` and still round-trip (:func:`split_rollout_id`).

``metadata`` is rLLM's current name of ``info`` on steps, trajectories and episodes: one dict
under both names, accepted by either name in the constructor. ``to_dict()`` / ``from_dict()``
give JSON-safe dicts (no pickle) with rLLM's keys, and read the dicts rLLM writes.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from copy import deepcopy
from dataclasses import InitVar, dataclass, field
from typing import Any

from rllm.contract.names import TerminationReason
from rllm.errors import DataError
from rllm.io import jsonable as _jsonable
from rllm.records import metadata_alias as _metadata_alias
from rllm.records import read_field as _read
from rllm.records import take_metadata as _take_metadata
from rllm.types.ids import new_id

__all__ = ["DEFAULT_TRAJ_NAME", "Episode", "Step", "Trajectory", "split_rollout_id"]


DEFAULT_TRAJ_NAME = "default_traj_name"
"""Name of a trajectory its workflow did not name."""


@_metadata_alias
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
    id: str = field(default_factory=new_id)
    input: Any = None
    output: Any = None
    model_output: Any = None
    routing_matrices: list[str] | None = None
    weight_version: int | None = None
    """Version of the policy weights that generated this step (asynchronous training)."""
    metadata: InitVar[dict[str, Any] | None] = None

    def __post_init__(self, metadata: dict[str, Any] | None) -> None:
        _take_metadata(self, metadata)
        self._take_model_output()
        if self.logprobs and len(self.logprobs) != len(self.response_ids):
            raise DataError(
                f"Step has {len(self.logprobs)} logprobs for {len(self.response_ids)} response tokens; "
                "give one logprob per response token, or none."
            )

    def attach(self, model_output: Any) -> None:
        """Record the model call this step came from, filling the token fields the agent left empty."""
        self.model_output = model_output
        self._take_model_output()

    def _take_model_output(self) -> None:
        """Fill the token fields left empty from ``model_output`` (rLLM's backfill).

        A step built as ``Step(..., model_output=output)`` thus trains on the ids and
        log-probs that were sampled, never on re-tokenised text. Read by attribute, so any
        object with ``prompt_ids``, ``completion_ids``, ``logprobs`` (each may be None) works.
        """
        output = self.model_output
        if output is None:
            return
        if not self.prompt_ids:
            self.prompt_ids = list(getattr(output, "prompt_ids", None) or [])
        if not self.response_ids:
            self.response_ids = list(getattr(output, "completion_ids", None) or [])
        if not self.logprobs:
            self.logprobs = list(getattr(output, "logprobs", None) or [])
        if self.routing_matrices is None:
            self.routing_matrices = getattr(output, "routing_matrices", None)
        if self.weight_version is None:
            self.weight_version = getattr(output, "weight_version", None)

    @classmethod
    def from_model_output(
        cls, model_output: Any, messages: list[dict[str, Any]] | None = None, action: Any = None
    ) -> Step:
        """A step from a rollout engine's ``ModelOutput`` (rLLM's constructor, read by attribute).

        ``model_output`` needs ``content`` and ``reasoning`` besides the token fields (each may
        be None); the assistant message is appended to ``messages``.
        """
        content = getattr(model_output, "content", None)
        reasoning = getattr(model_output, "reasoning", None)
        return cls(
            chat_completions=[*(messages or []), {"role": "assistant", "content": content, "reasoning": reasoning}],
            thought=reasoning or "",
            action=action,
            model_response=content or "",
            model_output=model_output,
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe dict with rLLM's keys (``info`` holds the metadata)."""
        names = (
            "id", "input", "output", "prompt_ids", "response_ids", "logprobs", "routing_matrices", "chat_completions",
            "observation", "thought", "action", "model_response", "model_output", "info", "reward", "done",
            "mc_return", "advantage", "weight_version",
        )  # fmt: skip
        return {name: _jsonable(getattr(self, name), f"Step.{name}") for name in names}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Step:
        """The step of :meth:`to_dict` (missing keys take their defaults; ``metadata`` is read as ``info``)."""
        return cls(
            id=_read(data, "id", new_id),
            input=data.get("input"),
            output=data.get("output"),
            prompt_ids=list(_read(data, "prompt_ids", list)),
            response_ids=list(_read(data, "response_ids", list)),
            logprobs=list(_read(data, "logprobs", list)),
            routing_matrices=data.get("routing_matrices"),
            chat_completions=list(_read(data, "chat_completions", list)),
            observation=data.get("observation"),
            thought=_read(data, "thought", str),
            action=data.get("action"),
            model_response=_read(data, "model_response", str),
            model_output=data.get("model_output"),
            info=dict(data.get("info") or data.get("metadata") or {}),
            reward=float(_read(data, "reward", float)),
            done=bool(data.get("done", False)),
            mc_return=float(_read(data, "mc_return", float)),
            advantage=data.get("advantage"),
            weight_version=data.get("weight_version"),
        )


_NUMBER_LISTS = ("prompt_ids", "response_ids", "logprobs", "advantage", "completion_ids", "prompt_logprobs")
"""The fields of a step and of its model output that hold lists of plain numbers (token ids, log-probs, advantages)."""


@_metadata_alias
@dataclass
class Trajectory:
    """The steps one role took in one episode, with the trajectory-level reward.

    ``input`` / ``output`` are the arguments and return value of an SDK-style agent function,
    ``signals`` named evaluation scores.
    """

    uid: str = field(default_factory=new_id)
    name: str = DEFAULT_TRAJ_NAME
    task: Any = None
    steps: list[Step] = field(default_factory=list)
    reward: float | None = None
    info: dict[str, Any] = field(default_factory=dict)
    input: dict[str, Any] | None = None
    output: Any = None
    signals: dict[str, float] = field(default_factory=dict)
    metadata: InitVar[dict[str, Any] | None] = None

    def __post_init__(self, metadata: dict[str, Any] | None) -> None:
        _take_metadata(self, metadata)

    def snapshot(self) -> Trajectory:
        """A deep copy, made cheaply: each step's token lists (and its model output's) are copied flat.

        What a workflow commits must not change when its agent goes on; ``deepcopy`` walks every
        token id through its memo, while ids and log-probs are plain numbers that a flat
        ``list`` copy already separates. Everything else is deep-copied as before.
        """
        memo: dict[int, Any] = {}
        for step in self.steps:
            for holder in (step, step.model_output):
                for name in _NUMBER_LISTS:
                    value = getattr(holder, name, None)
                    if type(value) is list:
                        memo[id(value)] = list(value)
        return deepcopy(self, memo)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe dict with rLLM's keys, steps included."""
        return {
            "uid": self.uid,
            "name": self.name,
            "task": _jsonable(self.task, "Trajectory.task"),
            "steps": [step.to_dict() for step in self.steps],
            "reward": None if self.reward is None else float(self.reward),
            "info": _jsonable(self.info, "Trajectory.info"),
            "input": _jsonable(self.input, "Trajectory.input"),
            "output": _jsonable(self.output, "Trajectory.output"),
            "signals": _jsonable(self.signals, "Trajectory.signals"),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Trajectory:
        return cls(
            uid=_read(data, "uid", new_id),
            name=_read(data, "name", lambda: DEFAULT_TRAJ_NAME),
            task=data.get("task"),
            steps=[Step.from_dict(step) for step in data.get("steps") or []],
            reward=data.get("reward"),
            info=dict(data.get("info") or data.get("metadata") or {}),
            input=data.get("input"),
            output=data.get("output"),
            signals={str(k): float(v) for k, v in (data.get("signals") or {}).items()},
        )


@functools.lru_cache(maxsize=1 << 14)
def split_rollout_id(episode_id: str) -> tuple[str, int]:
    """Split ``"{task_id}:{rollout_idx}"`` at its last ':' so task ids may contain ':'.

    Remembered for the last ids split (a step's grouping and packing ask each episode's task id several times).
    """
    task_id, sep, index = episode_id.rpartition(":")
    if not sep or not index.lstrip("-").isdigit():
        raise DataError(
            f"Episode id {episode_id!r} is not of the form '{{task_id}}:{{rollout_idx}}' with an integer rollout index."
        )
    return task_id, int(index)


@_metadata_alias
@dataclass
class Episode:
    """One rollout of one task, possibly with several roles (trajectories).

    ``session_id`` ties the episode to a serving session; ``artifacts`` holds named outputs
    of the rollout (files, patches, ...) as plain data.
    """

    id: str = ""
    task: Any = None
    termination_reason: TerminationReason | None = None
    is_correct: bool = False
    trajectories: list[Trajectory] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    session_id: str | None = None
    artifacts: dict[str, Any] = field(default_factory=dict)
    metadata: InitVar[dict[str, Any] | None] = None

    def __post_init__(self, metadata: dict[str, Any] | None) -> None:
        _take_metadata(self, metadata)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe dict with rLLM's keys, trajectories and steps included."""
        return {
            "id": self.id,
            "task": _jsonable(self.task, "Episode.task"),
            "termination_reason": _jsonable(self.termination_reason, "Episode.termination_reason"),
            "is_correct": bool(self.is_correct),
            "session_id": self.session_id,
            "trajectories": [trajectory.to_dict() for trajectory in self.trajectories],
            "artifacts": _jsonable(self.artifacts, "Episode.artifacts"),
            "metrics": _jsonable(self.metrics, "Episode.metrics"),
            "info": _jsonable(self.info, "Episode.info"),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Episode:
        reason = data.get("termination_reason")
        try:
            termination = None if reason is None else TerminationReason(reason)
        except ValueError:
            raise DataError(
                f"Episode {data.get('id')!r} has termination_reason {reason!r}; use one of "
                f"{', '.join(r.value for r in TerminationReason)}."
            ) from None
        return cls(
            id=str(data.get("id") or ""),
            task=data.get("task"),
            termination_reason=termination,
            is_correct=bool(data.get("is_correct", False)),
            trajectories=[Trajectory.from_dict(t) for t in data.get("trajectories") or []],
            metrics=dict(data.get("metrics") or {}),
            info=dict(data.get("info") or data.get("metadata") or {}),
            session_id=data.get("session_id"),
            artifacts=dict(data.get("artifacts") or {}),
        )

    @property
    def task_id(self) -> str:
        return split_rollout_id(self.id)[0]

    @property
    def rollout_idx(self) -> int:
        return split_rollout_id(self.id)[1]
