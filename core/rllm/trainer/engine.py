"""Moved to :mod:`rllm.rollouts` (the workflow engine and its executors); this path keeps working."""

from rllm.rollouts.executors import Executor, LocalExecutor, WorkflowCall, episode_seed, instantiate, run_call
from rllm.rollouts.workflow_engine import EngineStats, WorkflowEngine

__all__ = [
    "EngineStats",
    "Executor",
    "LocalExecutor",
    "WorkflowCall",
    "WorkflowEngine",
    "episode_seed",
    "instantiate",
    "run_call",
]
