"""rLLM's ``rllm.trainer.verl.verl_backend`` names: the backend class and the verl loss names it routes roles to.

``VerlBackend`` is this plugin's ``rllm.backend=verl`` (:class:`rllm_verl.backend.VerlBackend`), not
rLLM's Ray-launched one: it is built from the ``rllm.verl`` section and validates that config
when built. rLLM falls back to ``_DEFAULT_VERL_LOSS`` with a warning for a loss verl does not
know; here an unknown loss is a one-line error (rllm's loss registry resolves every name).
"""

from __future__ import annotations

from rllm_verl.backend import VerlBackend

_DEFAULT_VERL_LOSS = "vanilla"
"""verl's default ``policy_loss.loss_mode``."""


def _get_verl_known_losses() -> set[str]:
    """Every name in verl's policy-loss registry (verl's own and the ``rllm.<name>`` ones this plugin adds)."""
    from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY

    return set(POLICY_LOSS_REGISTRY)


__all__ = ["_DEFAULT_VERL_LOSS", "VerlBackend", "_get_verl_known_losses"]
