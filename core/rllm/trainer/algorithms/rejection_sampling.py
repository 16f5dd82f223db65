"""Rejection sampling at rLLM's current path: its configuration, the trainer's accumulation state and filter."""

from rllm.config.stages import RejectionSamplingConfig
from rllm.trainer.rejection import RejectionSamplingState, apply_rejection_sampling_and_filtering

__all__ = ["RejectionSamplingConfig", "RejectionSamplingState", "apply_rejection_sampling_and_filtering"]
