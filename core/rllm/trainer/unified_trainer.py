"""The unified trainer at rLLM's current path (``rllm.experimental.unified_trainer`` is the seed's)."""

from rllm.trainer.backend_protocol import BackendProtocol, TrainerState
from rllm.trainer.unified import UnifiedTrainer

__all__ = ["BackendProtocol", "TrainerState", "UnifiedTrainer"]
