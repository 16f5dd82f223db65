"""The backend protocol at rLLM's current path."""

from rllm.trainer.protocol import BackendProtocol, TrainerState

__all__ = ["BackendProtocol", "TrainerState"]
