"""rLLM's path of the distillation functions a workflow calls while it samples (:mod:`rllm.workflows.distillation`)."""

from rllm.workflows.distillation import (
    compute_distill_reverse_kl,
    compute_step_distill_advantage,
    discounted_future_sum,
)

__all__ = ["compute_distill_reverse_kl", "compute_step_distill_advantage", "discounted_future_sum"]
