"""Rejection sampling at rLLM's current path: the trainer's accumulation state and filter."""

from rllm.trainer.rejection import RejectionSamplingState, apply_rejection_sampling_and_filtering

__all__ = ["RejectionSamplingState", "apply_rejection_sampling_and_filtering"]
