"""The rollout engine's contract: what workflows sample from, and what the trainer asks of it.

A backend's ``init_rollout_engine`` returns a :class:`RolloutEngine`. Workflows call
:meth:`~RolloutEngine.generate` (token ids in, a :class:`Generation` out). The workflow
engine calls :meth:`~RolloutEngine.for_episode` once per episode, so that what an episode
samples depends on its own seed only, and the Ray executor calls
:meth:`~RolloutEngine.for_workers` once per batch for what its workers sample from. The
contract is core, not a backend's, so every backend's engine, and every workflow, is written
against the same type; it sits at rLLM's path for its engine (``rllm.engine.rollout``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

__all__ = ["PROMPT_TOO_LONG", "Generation", "RolloutEngine", "engine_problem"]

PROMPT_TOO_LONG = "prompt_length"
"""``Generation.finish_reason`` of a prompt longer than the engine takes: nothing was generated."""


@dataclass
class Generation:
    """One model call's answer: the response tokens, their sampling log-probs, its text and why it stopped."""

    response_ids: list[int]
    logprobs: list[float]
    text: str
    finish_reason: str = "stop"
    """``stop`` (end of sequence), ``length`` (max tokens) or :data:`PROMPT_TOO_LONG`."""
    prompt_ids: list[int] = field(default_factory=list)


@runtime_checkable
class RolloutEngine(Protocol):
    """What workflows sample from. Subclass it: :meth:`for_episode` and :meth:`for_workers` default to the engine.

    An engine that is not a subclass is accepted if it has every method below (checked when
    the workflow engine gets it, see :func:`engine_problem`).
    """

    async def generate(self, prompt_ids: Sequence[int], max_tokens: int | None = None) -> Generation:
        """Sample a response to ``prompt_ids`` (at most ``max_tokens`` tokens; None: the engine's limit)."""
        raise NotImplementedError(f"{type(self).__name__} must implement async generate(prompt_ids, max_tokens)")

    def for_episode(self, seed: int) -> RolloutEngine:
        """The engine one episode samples from, its randomness drawn from ``seed`` (default: this engine).

        Override it when the engine samples: each episode then gets the same samples whichever
        episodes share its batches, and whichever executor runs it.
        """
        return self

    def for_workers(self) -> RolloutEngine:
        """What the Ray executor sends its workers, once per batch (default: this engine, pickled).

        Override it when the engine cannot be pickled or should not be copied: return a
        snapshot of the weights, or a client of an inference server.
        """
        return self


ENGINE_METHODS = ("generate", "for_episode", "for_workers")
"""The methods of :class:`RolloutEngine`, each of which an engine must have."""


def engine_problem(engine: object) -> str | None:
    """Why ``engine`` cannot be a rollout engine (the methods it lacks), or None when it can."""
    missing = [name for name in ENGINE_METHODS if not callable(getattr(engine, name, None))]
    if not missing:
        return None
    kind = type(engine)
    return (
        f"The rollout engine {kind.__qualname__} (module {kind.__module__}) has no "
        f"{', '.join(f'{name}()' for name in missing)}: subclass rllm.engine.RolloutEngine (for_episode and "
        "for_workers default to the engine itself) or define them"
    )
