"""rLLM's ``patch_verl_actor_for_loss_override``: refused, since the actor it patches is not in the verl tested here.

rLLM patches ``verl.workers.actor.dp_actor.DataParallelPPOActor.update_policy`` so that one
``update_actor`` call per distinct loss can name its loss in ``meta_info``. verl 0.9.1, the version
this plugin is tested with, trains through its engine workers (``TrainingWorker``) and has no
``DataParallelPPOActor``; rllm's verl backend names the loss in the worker's own config instead.
"""

from __future__ import annotations

from rllm.errors import NotShippedError

OVERRIDE_KEY = "policy_loss_mode_override"
"""The ``meta_info`` key rLLM's patched actor reads."""


def patch_verl_actor_for_loss_override() -> None:
    """Refused in one line: there is no legacy actor to patch in the verl this plugin supports."""
    raise NotShippedError(
        "patch_verl_actor_for_loss_override patches verl's DataParallelPPOActor, which verl 0.9.1 does not have "
        "(its engine workers train); with rllm.backend=verl choose the loss with rllm.algorithm.loss_fn (docs/verl.md)."
    )
