"""The settings of a policy loss, declared once: what :func:`compute_policy_loss` takes besides the batch.

A role's settings come from a run's ``rllm.algorithm`` section (:meth:`LossSettings.from_algorithm`)
and are checked before the run starts; :mod:`rllm.losses.compute` checks and runs them.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from rllm.losses.kl import check_kl_kind
from rllm.losses.registry import loss_entry, resolve_loss_options

if TYPE_CHECKING:
    from rllm.losses.compute import CheckedLoss


@dataclass(frozen=True)
class LossSettings:
    """What a torch backend passes to :func:`compute_policy_loss` for one role, checked before a run starts.

    Built from a run's ``rllm.algorithm`` section by :meth:`from_algorithm`: the role's loss
    (``loss_fn_map``, else ``loss_fn``, else ``default``), ``loss_options`` over rLLM's
    ``eps_clip``/``eps_clip_high`` (as ``clip_ratio``/``clip_ratio_high`` for a loss that
    declares them), ``loss_agg_mode`` (unset: ``token-mean``, or the mode of a loss that fixes
    its own), the KL term (``use_kl_loss`` with ``kl_loss_coef``, rLLM's ``kl_beta``, and ``kl_loss_type``) and rollout
    correction (``tis_mode``, ``tis_cap``, ``tis_lower``, ``rollout_rs``, ``off_policy_mask_threshold``)
    and the entropy bonus (``entropy_coeff``).
    """

    name: str
    options: dict[str, Any] | None = None
    agg_mode: str | None = None
    kl_coef: float = 0.0
    kl_kind: str = "low_var_kl"
    tis_mode: str | None = None
    tis_cap: float = 2.0
    tis_lower: float | None = None
    rollout_rs: str | None = None
    rollout_rs_threshold: str | float | None = None
    off_policy_mask_threshold: float | None = None
    entropy_coeff: float = 0.0

    @classmethod
    def from_algorithm(cls, algorithm: Any, role: str = "default", default: str = "vanilla") -> LossSettings:
        """The checked settings of ``role`` from an :class:`rllm.AlgorithmConfig`; a bad choice is a named error."""
        name = algorithm.loss_fn_for(role) or default
        declared = {o.name for o in loss_entry(name).options}
        given: dict[str, Any] = {}
        if "clip_ratio" in declared:
            given["clip_ratio"] = algorithm.eps_clip
        if "clip_ratio_high" in declared and algorithm.eps_clip_high is not None:
            given["clip_ratio_high"] = algorithm.eps_clip_high
        given.update(algorithm.loss_options)
        _, options, mode = resolve_loss_options(name, given, algorithm.loss_agg_mode, "rllm.algorithm.loss_agg_mode")
        kl_kind = check_kl_kind(algorithm.kl_loss_type, "rllm.algorithm.kl_loss_type")
        correction = algorithm.rollout_correction
        return cls(
            name=name,
            options=options,
            agg_mode=mode,
            kl_coef=float(algorithm.kl_loss_coef) if algorithm.use_kl_loss else 0.0,
            kl_kind=kl_kind,
            tis_mode=correction.tis_mode,
            tis_cap=float(correction.tis_cap),
            tis_lower=correction.tis_lower,
            rollout_rs=correction.rollout_rs,
            rollout_rs_threshold=correction.rollout_rs_threshold,
            off_policy_mask_threshold=correction.off_policy_mask_threshold,
            entropy_coeff=float(algorithm.entropy_coeff),
        )

    def describe(self) -> str:
        """The loss as the start of a run names it: ``ppo (clip_ratio=0.2, clip_ratio_high=0.28; token-mean)``."""
        checked = self.checked
        extras = [", ".join(f"{k}={v!r}" for k, v in checked.options.items())] if checked.options else []
        extras.append(checked.agg_mode)
        if self.kl_coef:
            extras.append(f"KL {self.kl_kind} x {self.kl_coef:g}")
        if self.tis_mode is not None:
            lower = "" if self.tis_lower is None else f", zero below {self.tis_lower:g}"
            extras.append(f"TIS {self.tis_mode}, cap {self.tis_cap:g}{lower}")
        if self.rollout_rs is not None:
            extras.append(f"rejection {self.rollout_rs} at {self.rollout_rs_threshold}")
        if self.off_policy_mask_threshold is not None:
            extras.append(f"off-policy mask at KL {self.off_policy_mask_threshold:g}")
        if self.entropy_coeff:
            extras.append(f"entropy bonus x {self.entropy_coeff:g}")
        return f"{self.name} ({'; '.join(extras)})"

    @cached_property
    def checked(self) -> CheckedLoss:
        """These settings checked once (the first micro-batch), not on every call of :meth:`compute`."""
        from rllm.losses.compute import check_loss

        return check_loss(self)

    def compute(self, **tensors: Any) -> tuple[Any, dict[str, float]]:
        """:func:`compute_policy_loss` with these settings on ``log_probs=..., old_log_probs=..., ...``."""
        from rllm.losses.compute import run_checked_loss

        return run_checked_loss(self.checked, **tensors)
