"""rLLM's evaluation types: what an :class:`~rllm.types.Evaluator` returns (:mod:`rllm.eval.types`)."""

from __future__ import annotations

from rllm.eval.types import EvalOutput, Evaluator, Signal  # Evaluator: rllm.types's protocol

__all__ = ["EvalOutput", "Evaluator", "Signal"]
