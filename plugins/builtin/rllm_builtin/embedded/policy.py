"""A small language model in numpy: a softmax over the vocabulary from hashed context features.

The logits for the next token are the weight rows of the context's features (today one: the
whole context, hashed into a fixed table), so the policy conditions on the prompt and on
what it already said, and its log-probabilities have a closed-form gradient. It is trained
by plain gradient descent on the policy-gradient losses below.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from rllm.errors import ConfigError

LOSS_FUNCTIONS = ("ppo", "importance_sampling", "cispo")
REGISTRY_LOSSES = {"vanilla": "ppo", "importance_sampling": "importance_sampling", "cispo": "cispo"}
"""The registry's losses (by their own name, aliases resolve to it) this numpy policy runs, and its kind for each."""
DUAL_CLIP = 3.0
"""verl's default ``clip_ratio_c``: the dual clip of ``vanilla``."""


def _feature(tag: bytes, tokens: Sequence[int], size: int) -> int:
    return zlib.crc32(tag + np.asarray(tokens, dtype=np.int64).tobytes()) % size


class SoftmaxPolicy:
    """``p(token | context) = softmax(sum of the weight rows of the context's features)``."""

    def __init__(self, vocab_size: int, n_features: int) -> None:
        if n_features < 2:
            raise ConfigError(f"rllm.embedded.n_features must be at least 2, got {n_features}.")
        self.vocab_size = vocab_size
        self.n_features = n_features
        self.weights = np.zeros((n_features, vocab_size))

    def features(self, context: Sequence[int]) -> np.ndarray:
        """Row indices for a context: one row for the exact context.

        A feature shared between contexts (a bias row) was tried and dropped: it lets noise from
        one prompt's advantages collapse another prompt's distribution.
        """
        return np.array([_feature(b"ctx", context, self.n_features)])

    def log_probs(self, features: np.ndarray, temperature: float = 1.0) -> np.ndarray:
        """Log-probabilities over the vocabulary for each row of ``features`` (shape ``(n, k)``)."""
        logits = self.weights[features].sum(axis=1) / temperature
        logits -= logits.max(axis=1, keepdims=True)
        return logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))

    def sample(self, context: Sequence[int], rng: np.random.Generator, temperature: float) -> tuple[int, float]:
        """One token and its log-probability under the sampling distribution."""
        log_p = self.log_probs(self.features(context)[None, :], temperature)[0]
        token = int(rng.choice(self.vocab_size, p=np.exp(log_p)))
        return token, float(log_p[token])

    def logit_gradient(self, features: np.ndarray, d_logits: np.ndarray) -> np.ndarray:
        """Gradient with respect to the weights, given the gradient with respect to each row's logits."""
        grad = np.zeros_like(self.weights)
        np.add.at(grad, features, np.broadcast_to(d_logits[:, None, :], (*features.shape, self.vocab_size)))
        return grad


@dataclass
class LossTerms:
    loss: np.ndarray
    """Per-token loss."""
    d_logp: np.ndarray
    """Its derivative with respect to the token's current log-probability."""
    clipped: np.ndarray
    """Tokens whose gradient the clipping removed or capped."""


def policy_loss(
    kind: str,
    logp: np.ndarray,
    old_logp: np.ndarray,
    advantages: np.ndarray,
    clip_low: float,
    clip_high: float,
    clip_c: float = DUAL_CLIP,
) -> LossTerms:
    """Per-token policy-gradient loss of ``kind``, with the ratio ``exp(logp - old_logp)``.

    The numpy twins of the registry's ``importance_sampling`` (``-ratio * A``), ``vanilla``
    (``ppo``: the pessimistic maximum of the plain and the clipped ratio loss, capped at
    ``-A * clip_c`` for negative advantages, no gradient where a clip binds) and ``cispo`` (the
    ratio clamped to ``[1 - clip_low, 1 + clip_high]`` as a constant weight on ``-A * logp``,
    so no token loses its gradient entirely).
    """
    ratio = np.exp(np.clip(logp - old_logp, -20.0, 20.0))
    if kind == "importance_sampling":
        return LossTerms(-ratio * advantages, -ratio * advantages, np.zeros_like(ratio, dtype=bool))
    if kind == "ppo":
        clipped_ratio = np.clip(ratio, 1 - clip_low, 1 + clip_high)
        plain, clipped = -ratio * advantages, -clipped_ratio * advantages
        binds = clipped > plain
        pessimistic = np.maximum(plain, clipped)
        floor = -advantages * clip_c
        capped = (advantages < 0) & (pessimistic > floor)
        loss = np.where(capped, floor, pessimistic)
        return LossTerms(loss, np.where(binds | capped, 0.0, -ratio * advantages), binds | capped)
    if kind == "cispo":
        weight = np.clip(ratio, 1 - clip_low, 1 + clip_high)
        return LossTerms(-weight * advantages * logp, -weight * advantages, weight != ratio)
    raise ConfigError(f"Unknown loss {kind!r}; supported: {', '.join(LOSS_FUNCTIONS)}.")
