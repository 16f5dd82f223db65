"""KL to the reference policy: verl's estimator kinds, the per-token penalty, and the coefficient's controllers."""

from __future__ import annotations

import math
from numbers import Integral, Real
from typing import Any

from rllm.contract.names import KL_CONTROLLERS, KL_KIND_CHOICES
from rllm.errors import ConfigError, LossOptionError
from rllm.losses.arguments import KL_COEF, as_config_key
from rllm.losses.choices import one_of


def check_kl_kind(kind: Any, key: str = "kl_loss_type") -> str:
    """``kind`` if it names a KL estimator (optionally with the straight-through ``+``), else a named error."""
    return one_of(kind, KL_KIND_CHOICES, key, "a KL kind")


def kl_penalty(log_probs: Any, ref_log_probs: Any, kind: str) -> Any:
    """Per-token KL estimate between the policy and the reference, by verl's kinds.

    ``k1``/``kl``: the log-ratio; ``abs``: its absolute value; ``k2``/``mse``: half its
    square; ``k3``/``low_var_kl``: ``r - log r - 1`` with ``r = ref/policy`` (log-ratio
    clamped to ±20, result to ±10). A trailing ``+`` keeps the kind's value but takes the
    gradient of k2 (straight-through), whose gradient is unbiased.
    """
    import torch

    check_kl_kind(kind, "kl kind")
    base = kind.rstrip("+")
    diff = log_probs - ref_log_probs
    if base in ("kl", "k1"):
        value = diff
    elif base == "abs":
        value = diff.abs()
    elif base in ("mse", "k2"):
        value = 0.5 * diff.square()
    else:
        log_ratio = torch.clamp(-diff, min=-20.0, max=20.0)
        value = torch.clamp(torch.exp(log_ratio) - log_ratio - 1, min=-10.0, max=10.0)
    if not kind.endswith("+") or base in ("mse", "k2"):
        return value
    k2 = 0.5 * diff.square()
    return k2 - k2.detach() + value.detach()


def check_kl_coef(value: Any, what: str = "kl_coef") -> float:
    """``value`` as a float by the KL coefficient's one rule (``KL_COEF`` of the losses API), naming ``what``."""
    try:
        return float(as_config_key(KL_COEF, what).check(value))
    except ConfigError as exc:
        raise LossOptionError(str(exc)) from None


class FixedKLController:
    """A KL coefficient that never changes (``kl_ctrl.type=fixed``)."""

    def __init__(self, kl_coef: float) -> None:
        self.value = check_kl_coef(kl_coef, "kl_ctrl.kl_coef")

    def update(self, current_kl: float, n_steps: int) -> None:
        """Nothing to adapt."""


class AdaptiveKLController:
    """Ziegler et al.'s controller: moves the coefficient so the measured KL approaches ``target_kl``.

    Each update multiplies it by ``1 + clip(kl / target - 1, -0.2, 0.2) * min(n_steps / horizon, 1)``:
    verl's step, with the batch's share of the horizon capped at one. Up to ``horizon`` samples
    per update the numbers are verl's; a larger batch moves the coefficient by the clip's 20%
    at most, where verl's factor would exceed 1.2 and, past 5 x ``horizon`` samples below the
    target, turn the coefficient negative (a reward for diverging from the reference).
    """

    def __init__(self, init_kl_coef: float, target_kl: float, horizon: int) -> None:
        if isinstance(target_kl, bool) or not isinstance(target_kl, Real) or not 0 < target_kl < math.inf:
            raise LossOptionError(f"kl_ctrl.target_kl must be a finite number > 0; got {target_kl!r}.")
        if isinstance(horizon, bool) or not isinstance(horizon, Integral) or horizon < 1:
            raise LossOptionError(f"kl_ctrl.horizon must be an integer >= 1 (a count of samples); got {horizon!r}.")
        self.value = check_kl_coef(init_kl_coef, "kl_ctrl.kl_coef")
        self.target = float(target_kl)
        self.horizon = int(horizon)

    def update(self, current_kl: float, n_steps: int) -> None:
        """Adapt the coefficient after ``n_steps`` samples with mean KL ``current_kl``."""
        if isinstance(current_kl, bool) or not isinstance(current_kl, Real) or not math.isfinite(current_kl):
            raise LossOptionError(f"The adaptive KL controller needs a finite measured KL; got {current_kl!r}.")
        if isinstance(n_steps, bool) or not isinstance(n_steps, Integral) or n_steps < 0:
            raise LossOptionError(f"The adaptive KL controller needs a count of samples >= 0; got {n_steps!r}.")
        error = min(max(current_kl / self.target - 1.0, -0.2), 0.2)
        self.value *= 1.0 + error * min(n_steps / self.horizon, 1.0)


def kl_controller(
    kind: str, kl_coef: float, target_kl: float = 0.1, horizon: int = 10000
) -> FixedKLController | AdaptiveKLController:
    """The controller ``kind`` (``fixed`` or ``adaptive``), as verl's ``kl_ctrl`` section configures it."""
    kind = one_of(kind, KL_CONTROLLERS, "kl_ctrl.type", "a KL controller")
    if kind == "fixed":
        return FixedKLController(kl_coef)
    return AdaptiveKLController(kl_coef, target_kl, horizon)
