"""The training loop: :class:`UnifiedTrainer`, the backend protocol and the workflow engine."""

from rllm.trainer.engine import Executor, LocalExecutor, WorkflowCall, WorkflowEngine
from rllm.trainer.protocol import BackendProtocol, TaskSetup, TrainerState
from rllm.trainer.unified import UnifiedTrainer

__all__ = [
    "BackendProtocol",
    "Executor",
    "LocalExecutor",
    "TaskSetup",
    "TrainerState",
    "UnifiedTrainer",
    "WorkflowCall",
    "WorkflowEngine",
]
