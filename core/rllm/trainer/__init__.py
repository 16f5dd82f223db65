"""The training loop: :class:`UnifiedTrainer`, the backend protocol, the workflow engine and the trackers' contract.

Names are imported on first use, so ``import rllm`` (which only discovers the plugins' entry
points; the built-in backend and grouping hook register when a registry is first used) does
not pay for the trainer and asyncio until a run needs them.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "AgentTrainer": "rllm.trainer.agent",
    "AsyncSettings": "rllm.trainer.async_training",
    "BackendProtocol": "rllm.trainer.backend_protocol",
    "TaskSetup": "rllm.trainer.backend_protocol",
    "TrainerState": "rllm.trainer.backend_protocol",
    "Executor": "rllm.rollouts.executors",
    "LocalExecutor": "rllm.rollouts.executors",
    "WorkflowCall": "rllm.rollouts.executors",
    "WorkflowEngine": "rllm.rollouts.workflow_engine",
    "ProcessGroup": "rllm.rollouts.parallel",
    "TaskLoader": "rllm.trainer.dataloading",
    "ConsoleTracker": "rllm.trainer.logging",
    "JsonlTracker": "rllm.trainer.logging",
    "Tracker": "rllm.trainer.trackers",
    "TrackerRun": "rllm.trainer.trackers",
    "finite_metrics": "rllm.trainer.trackers",
    "flatten_config": "rllm.trainer.trackers",
    "UnifiedTrainer": "rllm.trainer.unified",
    "group_by_task_and_role": "rllm.trainer.grouping",
    "lr_factor": "rllm.trainer.lr_schedule",
    "resolve_backend": "rllm.trainer.components",
    "scheduled_lr": "rllm.trainer.lr_schedule",
    "share_of": "rllm.rollouts.parallel",
    "task_loader": "rllm.trainer.dataloading",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'rllm.trainer' has no attribute {name!r}")
    return getattr(import_module(_EXPORTS[name]), name)
