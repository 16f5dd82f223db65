"""Built-in tasks with verifiable rewards, shared by every backend that trains a model on them.

They are core (not one backend's) so that each shipped backend reaches them through rllm
alone: the embedded and the transformers backends train the same ``digit_*`` tasks with the
same :class:`ArithmeticWorkflow`. ``VOCAB[i]`` is token ``i``'s text (the digits 0-9 are
tokens 0-9); ``PLUS``, ``EQUALS``, ``ARROW`` and ``EOS`` are the other token ids, and
``decode`` turns ids into text. ``TASKS`` maps each task family's name to its builder.

Their text versions (:mod:`rllm.tasks.text`, ``TEXT_TASKS``) ask the same questions in words
for chat models and score the reply with :func:`text_reward`.
"""

from __future__ import annotations

from rllm.tasks.digits import (
    ARROW,
    EOS,
    EQUALS,
    PLUS,
    ROLE,
    TASKS,
    VOCAB,
    ArithmeticWorkflow,
    build_tasks,
    decode,
    digit_chain_tasks,
    digit_max_tasks,
    digit_sum_tasks,
)
from rllm.tasks.text import (
    ANSWER_PREFIX,
    TEXT_TASKS,
    TextEvaluator,
    format_answer,
    parse_answer,
    text_digit_max_tasks,
    text_digit_sum_tasks,
    text_reward,
)

__all__ = [
    "ANSWER_PREFIX",
    "ARROW",
    "EOS",
    "EQUALS",
    "PLUS",
    "ROLE",
    "TASKS",
    "TEXT_TASKS",
    "VOCAB",
    "ArithmeticWorkflow",
    "TextEvaluator",
    "build_tasks",
    "decode",
    "digit_chain_tasks",
    "digit_max_tasks",
    "digit_sum_tasks",
    "format_answer",
    "parse_answer",
    "text_digit_max_tasks",
    "text_digit_sum_tasks",
    "text_reward",
]
