"""The embedded CPU backend: a numpy softmax policy, its rollout engine and built-in tasks.

Workflows written for it use the vocabulary exported here: ``VOCAB[i]`` is token ``i``'s
text (the digits 0-9 are tokens 0-9), ``PLUS``, ``EQUALS``, ``ARROW`` and ``EOS`` are the
other token ids, and ``decode`` turns ids into text.
"""

from rllm_builtin.embedded.backend import EmbeddedBackend, EmbeddedRolloutEngine, Generation
from rllm_builtin.embedded.tasks import ARROW, EOS, EQUALS, PLUS, VOCAB, ArithmeticWorkflow, build_tasks, decode

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
