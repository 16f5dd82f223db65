"""rLLM's path for the rollout engine: :mod:`rllm.engine.rollout.rollout_engine`."""

from __future__ import annotations

from rllm.engine.rollout.rollout_engine import (
    PROMPT_TOO_LONG,
    EpisodeView,
    Generation,
    ModelOutput,
    RolloutEngine,
    engine_problem,
)
from rllm.engine.rollout.types import TokenInput, Tokenizer, TokenOutput

__all__ = [
    "PROMPT_TOO_LONG",
    "EpisodeView",
    "Generation",
    "ModelOutput",
    "RolloutEngine",
    "TokenInput",
    "TokenOutput",
    "Tokenizer",
    "engine_problem",
]
