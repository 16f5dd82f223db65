"""Per-group estimator helpers at rLLM's current path."""

from rllm.estimators.list_api import calculate_grpo_advantages_per_group, calculate_rloo_advantages_per_group

__all__ = ["calculate_grpo_advantages_per_group", "calculate_rloo_advantages_per_group"]
