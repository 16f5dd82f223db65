"""The embedded CPU backend: a numpy softmax policy and its rollout engine.

The built-in tasks and their vocabulary live in :mod:`rllm.tasks` (every backend trains
them); they are re-exported here, where workflows written for this backend import them.
"""

from rllm.engine import Generation
from rllm.tasks import ARROW, EOS, EQUALS, PLUS, VOCAB, ArithmeticWorkflow, build_tasks, decode
from rllm_builtin.embedded.backend import EmbeddedBackend, EmbeddedRolloutEngine

__all__ = [
    "ARROW",
    "EOS",
    "EQUALS",
    "PLUS",
    "VOCAB",
    "ArithmeticWorkflow",
    "EmbeddedBackend",
    "EmbeddedRolloutEngine",
    "Generation",
    "build_tasks",
    "decode",
]
