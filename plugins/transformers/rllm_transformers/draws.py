"""Drawing tokens: the distribution a token is drawn from (temperature, top-k, top-p), each row's uniforms from its
own stream, and the inverse-CDF draw on the model's device (:class:`~rllm_transformers.engine.TransformersEngine`
samples through these, ``rllm serve`` and the Tinker server through the engine)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch


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


_MASK = (1 << 64) - 1
_GAMMA = 0x9E3779B97F4A7C15
"""SplitMix64's increment: the odd constant nearest 2**64 over the golden ratio."""


def _finalise(z: np.ndarray) -> np.ndarray:
    """SplitMix64's output function on uint64s (numpy's unsigned arithmetic wraps modulo 2**64)."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


class UniformStream:
    """A request's random numbers: uniform ``i`` of the stream is a fixed function of ``(seed, i)``.

    Counter-based (SplitMix64 started from a state derived from the seed), so a stream is two
    integers: an episode's view makes one without building a generator, a batch's rows are drawn
    in one vectorised call (:func:`row_uniforms`), and a checkpoint keeps the seed and the position.
    """

    __slots__ = ("position", "seed")

    def __init__(self, seed: int | None = None, position: int = 0) -> None:
        """``seed`` None: one of this process's own, from the operating system (calls nobody replays)."""
        self.seed = (int.from_bytes(os.urandom(8), "little") if seed is None else int(seed)) & _MASK
        self.position = position

    def take(self, count: int) -> int:
        """Where the next ``count`` uniforms start; the stream moves past them."""
        start = self.position
        self.position += count
        return start

    def get_state(self) -> torch.Tensor:
        """The seed and the position as 16 bytes (a checkpoint stores them as it stores torch's generators)."""
        raw = self.seed.to_bytes(8, "little") + self.position.to_bytes(8, "little")
        return torch.frombuffer(bytearray(raw), dtype=torch.uint8)

    def set_state(self, state: torch.Tensor) -> None:
        raw = bytes(state.to(torch.uint8).tolist())
        if len(raw) != 16:
            raise ValueError(f"a uniform stream's state is 16 bytes (seed, position), not {len(raw)}")
        self.seed, self.position = int.from_bytes(raw[:8], "little"), int.from_bytes(raw[8:], "little")


def uniforms_at(seeds: Sequence[int], starts: Sequence[int], width: int) -> np.ndarray:
    """``[rows, width]`` float64 uniforms in ``[0, 1)``: row r's are its stream's from position ``starts[r]`` on."""
    keys = _finalise(np.array(seeds, dtype=np.uint64)[:, None])
    counters = np.array(starts, dtype=np.uint64)[:, None] + np.arange(1, width + 1, dtype=np.uint64)
    bits = _finalise(keys + counters * np.uint64(_GAMMA))
    return (bits >> np.uint64(11)).astype(np.float64) * 2.0**-53


def row_uniforms(streams: Sequence[UniformStream], counts: Sequence[int], device: torch.device) -> torch.Tensor:
    """``[rows, max(counts)]`` uniforms on ``device``: row r's first ``counts[r]`` the next of its own stream.

    Each row's stream moves by ``counts[r]`` (its request's ``max_tokens``) once per batch,
    before its first token, whatever its neighbours generate and whenever it stops, so an
    episode's next call continues where this one left it. A row's columns past its count are
    never read. One small host array crosses to the device; nothing is drawn per token.
    """
    starts = [stream.take(count) for stream, count in zip(streams, counts, strict=True)]
    noise = uniforms_at([stream.seed for stream in streams], starts, max(counts))
    return torch.from_numpy(noise).to(device)


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
