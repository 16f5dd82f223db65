"""rLLM's evaluation types: the :class:`Evaluator` protocol and what it returns (:mod:`rllm.eval.types`)."""

from __future__ import annotations

from rllm.eval.types import EvalOutput, Evaluator, Signal

__all__ = ["EvalOutput", "Evaluator", "Signal"]
