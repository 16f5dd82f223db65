"""``asample`` requests as :class:`SampleJob` (checked by :func:`.checks.read_sample`), sampled in batches.

Jobs that wait in the queue together (they arrived while a batch was being sampled, or within
:data:`BATCH_WINDOW` of each other) are sampled in one batched call of the transformers engine's
sampler, one batch per weights and sampling settings (:func:`batches`). A row's random numbers
come from its own request's stream (a seeded request's own, an unseeded one's the server's,
in arrival order), so what a seeded request samples does not depend on the requests batched with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rllm_transformers.engine import Sampling

BATCH_WINDOW = 0.005
"""Seconds the worker waits, while requests keep arriving, before it samples a batch that found the server idle."""
BATCH_WAIT = 0.05
"""The most seconds that wait lasts, however many requests arrive."""


@dataclass(frozen=True)
class SampleJob:
    """One checked ``asample`` request: ``count`` continuations of ``prompt`` from ``weights`` (None: base model)."""

    weights: str | None
    prompt: list[int]
    count: int
    max_tokens: int
    sampling: Sampling
    seed: int | None
    stop_ids: frozenset[int]
    stop_texts: tuple[str, ...]
    with_prompt_logprobs: bool

    @property
    def key(self) -> tuple[str | None, Sampling]:
        """What jobs sampled in one batch share: the sampler's weights and the sampling settings."""
        return self.weights, self.sampling


def batches(jobs: Sequence[SampleJob]) -> list[list[int]]:
    """The indices of ``jobs`` by :attr:`SampleJob.key`, in arrival order within each batch and between batches."""
    grouped: dict[tuple[str | None, Sampling], list[int]] = {}
    for index, job in enumerate(jobs):
        grouped.setdefault(job.key, []).append(index)
    return list(grouped.values())
