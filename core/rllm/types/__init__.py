"""The data model that rollouts, estimators and trainers exchange, at rLLM's path ``rllm.types``.

Records of a rollout (``rllm.types.episodes``: :class:`Step`, :class:`Trajectory`,
:class:`Episode`), their groups (``rllm.types.groups``: :class:`TrajectoryGroup`) and what a
workflow is given (``rllm.types.tasks``). rLLM's protocols :class:`AgentFlow` and
:class:`Evaluator` are exported here as rLLM does, but live above the data model
(``rllm.agents.flow``, ``rllm.eval.types``): they load on first use, so importing the
data model never imports them (which would be an import loop, since they are written in its terms).
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from rllm.contract.names import TerminationReason
from rllm.types.episodes import DEFAULT_TRAJ_NAME, Episode, Step, Trajectory, split_rollout_id
from rllm.types.groups import DEFAULT_ROLE, TrajectoryGroup
from rllm.types.tasks import Action, AgentConfig, Task, TerminationEvent

__all__ = [
    "DEFAULT_ROLE",
    "DEFAULT_TRAJ_NAME",
    "Action",
    "AgentConfig",
    "AgentFlow",
    "Episode",
    "Evaluator",
    "Step",
    "Task",
    "TerminationEvent",
    "TerminationReason",
    "Trajectory",
    "TrajectoryGroup",
    "split_rollout_id",
]

_PROTOCOLS = {"AgentFlow": "rllm.agents.flow", "Evaluator": "rllm.eval.types"}
"""rLLM's protocols exported here, by the module (above this one) that defines each; imported by name on use."""


def __getattr__(name: str) -> Any:
    if name in _PROTOCOLS:
        value = getattr(import_module(_PROTOCOLS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_PROTOCOLS})
