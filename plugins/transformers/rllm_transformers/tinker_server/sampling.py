"""``asample`` requests: checked into a :class:`SampleJob` when they arrive, then sampled in batches.

Jobs that wait in the queue together (they arrived while a batch was being sampled, or within
:data:`BATCH_WINDOW` of each other) are sampled in one batched call of the transformers engine's
sampler, one batch per weights and sampling settings (:func:`batches`). A row's random numbers
come from its own request's generator (a seeded request's own, an unseeded one's the server's,
in arrival order), so what a seeded request samples does not depend on the requests batched with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rllm_transformers.engine import Sampling
from rllm_transformers.tinker_server.wire import WireError

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


def read_sample(route: str, body: dict[str, Any], weights: str | None, vocab: int, context: int) -> SampleJob:
    """The request's job, or a :class:`WireError` naming the field (every ``asample`` is checked here)."""
    prompt = [int(t) for chunk in (body.get("prompt") or {}).get("chunks") or [] for t in chunk.get("tokens") or []]
    if not prompt:
        raise WireError(route, "prompt", "has no tokens.")
    bad = [t for t in prompt if not 0 <= t < vocab]
    if bad:
        raise WireError(route, "prompt", f"token id {bad[0]} is outside the vocabulary (0..{vocab - 1}).")
    room = context - len(prompt)
    if room < 1:
        raise WireError(route, "prompt", f"has {len(prompt)} tokens; the model's context is {context}.")
    count = body.get("num_samples", 1)
    if not isinstance(count, int) or count < 1:
        raise WireError(route, "num_samples", f"must be a positive integer, got {count!r}.")
    for key in ("topk_prompt_logprobs", "topk_sample_logprobs", "prompt_alt_tokens_k"):
        if body.get(key):
            raise WireError(route, key, "is not served by this server; leave it 0.")
    for key in ("target_prompt_logprobs", "prompt_logprobs_last_n", "record_stability_info"):
        if body.get(key):
            raise WireError(route, key, "is not served by this server; leave it unset.")
    params = body.get("sampling_params") or {}
    max_tokens = params.get("max_tokens")
    max_tokens = room if max_tokens is None else max_tokens
    if not isinstance(max_tokens, int) or max_tokens < 1:
        raise WireError(route, "sampling_params.max_tokens", f"must be a positive integer, got {max_tokens!r}.")
    temperature = float(params.get("temperature", 1.0))
    top_p, top_k = float(params.get("top_p", 1.0)), int(params.get("top_k", -1))
    if temperature < 0 or not 0 < top_p <= 1:
        raise WireError(route, "sampling_params", "needs temperature >= 0 and 0 < top_p <= 1.")
    stop = params.get("stop")
    stop = [stop] if isinstance(stop, str) else stop
    if stop is not None and not stop:
        raise WireError(route, "sampling_params.stop", "[] (no stop at all) is not served: sampling stops at EOS.")
    seed = params.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise WireError(route, "sampling_params.seed", f"must be an integer, got {seed!r}.")
    return SampleJob(
        weights,
        prompt,
        count,
        min(max_tokens, room),
        Sampling(temperature, top_p, max(top_k, 0)),
        seed,
        frozenset(s for s in stop or [] if isinstance(s, int)),
        tuple(s for s in stop or [] if isinstance(s, str)),
        bool(body.get("prompt_logprobs")),
    )
