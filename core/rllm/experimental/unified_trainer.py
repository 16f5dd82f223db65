"""The documented ``rllm.experimental.unified_trainer`` import path (rLLM's scripts import ``AgentTrainer`` here)."""

from rllm.trainer.agent import AgentTrainer
from rllm.trainer.backend_protocol import BackendProtocol, TrainerState
from rllm.trainer.unified import UnifiedTrainer

__all__ = ["AgentTrainer", "BackendProtocol", "TrainerState", "UnifiedTrainer"]
