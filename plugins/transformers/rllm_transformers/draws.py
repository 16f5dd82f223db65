"""Drawing tokens: the distribution a token is drawn from (temperature, top-k, top-p), each row's uniforms from its
own generator, and the inverse-CDF draw on the model's device (:class:`~rllm_transformers.engine.TransformersEngine`
samples through these, ``rllm serve`` and the Tinker server through the engine)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch.nn.utils.rnn import pad_sequence


@dataclass(frozen=True)
class Sampling:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    """0: no top-k cut."""


def sampling_log_probs(logits: torch.Tensor, sampling: Sampling) -> torch.Tensor:
    """Log-probabilities of the distribution tokens are drawn from: tempered, then cut by top-k and top-p."""
    logits = logits.float() if sampling.temperature == 1.0 else logits.float() / sampling.temperature  # x / 1 is x
    if sampling.top_k > 0 and sampling.top_k < logits.shape[-1]:
        kth = torch.topk(logits, sampling.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if sampling.top_p < 1.0:
        ordered, order = torch.sort(logits, dim=-1, descending=True)
        probs = torch.softmax(ordered, dim=-1)
        before = probs.cumsum(dim=-1) - probs  # mass of the tokens ranked above each one
        drop = before >= sampling.top_p  # the first token is always kept
        logits = logits.masked_fill(drop.scatter(-1, order, drop), float("-inf"))
    return torch.log_softmax(logits, dim=-1)


def row_uniforms(generators: Sequence[torch.Generator], counts: Sequence[int], device: torch.device) -> torch.Tensor:
    """``[rows, max(counts)]`` uniforms on ``device``: row r's first ``counts[r]`` drawn from its own generator.

    Each row takes ``torch.rand(counts[r], dtype=float64, generator=...)`` once per batch,
    before its first token: how far a row's stream advances is its own request's
    ``max_tokens``, whatever its neighbours generate and whenever it stops, so an episode's
    next call continues where this one left it. One small host tensor crosses to the device;
    nothing is drawn per token.
    """
    drawn = [torch.rand(count, dtype=torch.float64, generator=g) for g, count in zip(generators, counts, strict=True)]
    noise = torch.stack(drawn) if len(set(counts)) == 1 else pad_sequence(drawn, batch_first=True)
    return torch.as_tensor(noise, device=device)


BLOCK = 1024
"""Above this many tokens :func:`draw_rows` draws in two levels: a block of this many tokens, then a token in it."""


def draw_rows(log_p: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """One token per row by inverse CDF: the first token whose running total of probability passes the row's uniform.

    ``log_p`` is ``[rows, vocab]``, ``uniforms`` ``[rows]`` in ``[0, 1)``, and everything stays
    on ``log_p``'s device: per token only the ``rows`` chosen ids exist as a result. A large
    vocabulary is drawn in two levels, so no running total over all of it is needed: the
    block of :data:`BLOCK` tokens from the blocks' masses, then the token within it, from where
    the uniform fell in that block's share. Token ``i`` is picked with probability
    ``p_i / sum(p)``; a token of probability 0 (cut by top-k or top-p) never is.
    """
    probs = log_p.exp()
    rows, vocab = probs.shape
    uniforms = uniforms.to(torch.float64)[:, None]
    if vocab <= BLOCK:
        return _search(probs, uniforms)[0].squeeze(-1)
    whole = vocab // BLOCK * BLOCK
    parts = [probs[:, :whole].reshape(rows, -1, BLOCK).sum(dim=-1)]
    if whole < vocab:
        parts.append(probs[:, whole:].sum(dim=-1, keepdim=True))
    masses = torch.cat(parts, dim=-1)
    block, running, target = _search(masses, uniforms)
    # where the target fell within the block's mass, as a fraction: given the block, a uniform again
    mass = masses.gather(-1, block).to(torch.float64)
    within = ((target - (running.gather(-1, block) - mass)) / mass).clamp(0.0, 1.0)
    ids = block * BLOCK + torch.arange(BLOCK, device=probs.device)
    chosen = probs.gather(-1, ids.clamp(max=vocab - 1)) * (ids < vocab)  # past the vocabulary: probability 0
    return (block * BLOCK + _search(chosen, within)[0]).squeeze(-1)


def _search(weights: torch.Tensor, uniforms: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per row, the first index whose running total (float64) passes ``uniforms`` (``[rows, 1]``) times the total.

    Returns the index and the target (``[rows, 1]`` each) and the running totals. The search
    lands where the total grows past the target, so an index of weight 0 is never returned.
    """
    running = weights.cumsum(dim=-1, dtype=torch.float64)
    total = running[:, -1:]
    below_total = torch.nextafter(total, torch.zeros_like(total))  # a uniform near 1 can round up to the total
    target = torch.minimum(uniforms * total, below_total)
    return torch.searchsorted(running, target, right=True), running, target
