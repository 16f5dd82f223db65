"""On-policy distillation at rLLM's paths: the per-token advantage of a student's sample under a teacher."""

from rllm.workflows.distillation import (
    compute_distill_reverse_kl,
    compute_step_distill_advantage,
    discounted_future_sum,
)

__all__ = ["compute_distill_reverse_kl", "compute_step_distill_advantage", "discounted_future_sum"]
