"""Shim: the validation metrics (the unbiased pass@k) live in :mod:`rllm.trainer.pass_at_k`."""

from rllm.trainer.pass_at_k import pass_at_k_metrics, unbiased_pass_at_k

__all__ = ["pass_at_k_metrics", "unbiased_pass_at_k"]
