"""KL in the reward (verl's ``use_kl_in_reward``): the per-token penalty of a batch and its controller.

The penalty is ``coef * KL`` per response token, the KL taken between the policy that sampled
the batch and the reference policy by ``kl_penalty``'s estimator; a backend subtracts it from
the rewards before advantages are computed. After each batch the controller sees the batch's
mean KL (each sequence's token mean, averaged over sequences, as verl measures it), so an
adaptive coefficient moves toward ``kl_ctrl.target_kl``. Like :mod:`rllm.losses`, this module
imports torch only when a penalty is computed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from rllm.errors import TrainerError
from rllm.losses.kl import (
    AdaptiveKLController,
    FixedKLController,
    check_kl_coef,
    check_kl_kind,
    kl_controller,
    kl_penalty,
)

__all__ = ["KLInReward", "batch_mean_kl"]


def batch_mean_kl(kl: Any, mask: Any) -> float:
    """The mean over sequences (those with a response token) of each sequence's mean KL per token."""
    tokens = mask.sum(dim=-1)
    present = tokens > 0
    if not bool(present.any()):
        return 0.0
    per_sequence = (kl * mask).sum(dim=-1)[present] / tokens[present]
    return float(per_sequence.mean())


@dataclass
class KLInReward:
    """A run's KL-in-reward settings and its controller, whose coefficient changes from batch to batch.

    Built by :meth:`from_algorithm` from ``rllm.algorithm`` (``use_kl_in_reward``,
    ``kl_penalty``, ``kl_ctrl.*``). :meth:`penalty` gives a batch's per-token penalty with the
    current coefficient and then updates the controller, in verl's order: the batch is
    penalised with the coefficient from before its own KL was seen.
    """

    kind: str
    controller: FixedKLController | AdaptiveKLController

    @classmethod
    def from_algorithm(cls, algorithm: Any) -> KLInReward | None:
        """The settings of an :class:`rllm.AlgorithmConfig`; None when ``use_kl_in_reward`` is off."""
        if not algorithm.use_kl_in_reward:
            return None
        ctrl = algorithm.kl_ctrl
        return cls(
            kind=check_kl_kind(algorithm.kl_penalty, "rllm.algorithm.kl_penalty"),
            controller=kl_controller(ctrl.type, ctrl.kl_coef, ctrl.target_kl, ctrl.horizon),
        )

    @property
    def coef(self) -> float:
        """The coefficient the next batch is penalised with."""
        return float(self.controller.value)

    @coef.setter
    def coef(self, value: float) -> None:
        """Restore a coefficient (from a checkpoint); it must be a finite, non-negative number."""
        self.controller.value = check_kl_coef(value, "The KL-in-reward coefficient")

    def penalty(self, old_log_probs: Any, ref_log_probs: Any, mask: Any) -> tuple[Any, dict[str, float]]:
        """``coef * KL`` per token (0 off ``mask``, no gradient) and the metrics; then the controller's update.

        ``old_log_probs`` are the sampling policy's log-probs of the batch's tokens,
        ``ref_log_probs`` the reference policy's, both ``(sequences, tokens)``. The update
        counts every sequence of the batch as one sample (verl's ``n_steps=batch_size``).
        """
        import torch

        with torch.no_grad():
            kl = kl_penalty(old_log_probs, ref_log_probs, self.kind) * mask
            coef = self.coef
            mean_kl = batch_mean_kl(kl, mask)
            if not math.isfinite(mean_kl):
                raise TrainerError(
                    f"The KL of the rollout policy to the reference is {mean_kl} (not finite) with "
                    f"rllm.algorithm.kl_penalty={self.kind!r}; the rewards were not penalised."
                )
            penalty = coef * kl
            if not bool(torch.isfinite(penalty.sum(dim=-1)).all()):
                moved = (
                    " (as the adaptive controller moved it)"
                    if isinstance(self.controller, AdaptiveKLController)
                    else ""
                )
                raise TrainerError(
                    f"The KL-in-reward penalty is not finite: coefficient {coef:g}{moved} times the batch's KL "
                    f"(mean {mean_kl:g} per token) overflows the rewards; lower rllm.algorithm.kl_ctrl.kl_coef. "
                    "The rewards were not penalised."
                )
            self.controller.update(mean_kl, int(mask.shape[0]))
        return penalty, {"kl_in_reward/coef": coef, "kl_in_reward/kl": mean_kl}
