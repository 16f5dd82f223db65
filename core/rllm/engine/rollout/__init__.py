"""rLLM's path for the rollout engine: :mod:`rllm.engine.rollout.rollout_engine`."""

from __future__ import annotations

from rllm.engine.rollout.rollout_engine import PROMPT_TOO_LONG, Generation, RolloutEngine, engine_problem

__all__ = ["PROMPT_TOO_LONG", "Generation", "RolloutEngine", "engine_problem"]
