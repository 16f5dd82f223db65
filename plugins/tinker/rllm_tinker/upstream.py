"""The Tinker loss names at rLLM's path ``rllm.trainer.tinker.tinker_policy_trainer``.

rLLM falls back to ``DEFAULT_LOSS_FN`` (with a warning) for a role whose loss Tinker does not
know; this backend refuses such a loss in one line instead (docs/tinker.md), and routes a role
without a loss of its own by upstream's rule (:func:`rllm_tinker.backend.default_loss`).
"""

from __future__ import annotations

from rllm_tinker.plugin import TINKER_LOSSES

DEFAULT_LOSS_FN = "importance_sampling"
"""rLLM's fallback loss name; here the loss of a role that is not trained with GRPO and names none."""
TINKER_KNOWN_LOSSES = frozenset(TINKER_LOSSES)
"""The losses a Tinker service computes (Tinker's names)."""

__all__ = ["DEFAULT_LOSS_FN", "TINKER_KNOWN_LOSSES"]
