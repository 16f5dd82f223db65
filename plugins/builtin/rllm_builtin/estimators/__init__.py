"""The built-in advantage estimators, as batch-style kernels over flat arrays."""

from rllm_builtin.estimators.group_baselines import grpo, reinforce, reinforce_plus_plus_baseline, rloo

__all__ = ["grpo", "reinforce", "reinforce_plus_plus_baseline", "rloo"]
