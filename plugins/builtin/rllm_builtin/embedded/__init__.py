"""The embedded CPU backend: a numpy softmax policy, its rollout engine and built-in tasks."""

from rllm_builtin.embedded.backend import EmbeddedBackend, EmbeddedRolloutEngine, Generation
from rllm_builtin.embedded.tasks import ArithmeticWorkflow, build_tasks

__all__ = ["ArithmeticWorkflow", "EmbeddedBackend", "EmbeddedRolloutEngine", "Generation", "build_tasks"]
