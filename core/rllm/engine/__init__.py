"""What workflows sample from: the rollout engine's contract (:class:`RolloutEngine`) and its answer.

The contract is in :mod:`rllm.engine.rollout.rollout_engine`; every backend's engine
implements it, and workflows are written against it.
"""

from __future__ import annotations

from rllm.engine.rollout import PROMPT_TOO_LONG, Generation, RolloutEngine, engine_problem

__all__ = ["PROMPT_TOO_LONG", "Generation", "RolloutEngine", "engine_problem"]
