"""Shim: the backend protocol lives at rLLM's current path, :mod:`rllm.trainer.backend_protocol`."""

from rllm.trainer.backend_protocol import BackendProtocol, TaskSetup, TrainerState, task_id_of

__all__ = ["BackendProtocol", "TaskSetup", "TrainerState", "task_id_of"]
