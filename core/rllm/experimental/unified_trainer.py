"""The documented ``rllm.experimental.unified_trainer`` import path."""

from rllm.trainer.backend_protocol import BackendProtocol, TrainerState
from rllm.trainer.unified import UnifiedTrainer

__all__ = ["BackendProtocol", "TrainerState", "UnifiedTrainer"]
