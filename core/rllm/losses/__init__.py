"""Policy losses by name: the context a loss receives, aggregation, KL penalties and controllers.

KL in the reward (:class:`KLInReward`) lives in :mod:`rllm.losses.kl_reward`.

A loss is ``fn(ctx: LossContext) -> (scalar_tensor, metrics)``, registered by a plugin's
``rllm_register_losses`` hook (see :mod:`rllm.plugins.hookspecs`). This module imports no
torch: the functions that compute import it when called, and a loss's module is imported the
first time the loss is used.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rllm.errors import LossOptionError
from rllm.plugins.hookspecs import LOSS_AGG_MODES
from rllm.plugins.registry import LossEntry

KL_KINDS = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")
"""verl's KL estimators (k1, abs, k2, k3 and their long names); each also with a trailing ``+``."""
TIS_MODES = ("token", "sequence")
"""Levels of truncated importance sampling for rollout correction."""
LossFn = Callable[["LossContext"], tuple[Any, dict[str, float]]]

__all__ = [
    "KL_KINDS",
    "LOSS_AGG_MODES",
    "TIS_MODES",
    "AdaptiveKLController",
    "FixedKLController",
    "KLInReward",
    "LossContext",
    "LossSettings",
    "aggregate",
    "batch_mean_kl",
    "check_agg_mode",
    "check_kl_kind",
    "compute_policy_loss",
    "get_loss",
    "inactive_kl_keys",
    "kl_controller",
    "kl_penalty",
    "loss_entry",
    "loss_names",
    "resolve_loss_options",
    "truncated_is_weights",
]


def _one_of(value: Any, choices: tuple[str, ...], key: str, what: str) -> str:
    if isinstance(value, str) and value in choices:
        return value
    close = difflib.get_close_matches(str(value), choices, n=3, cutoff=0.5)
    hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
    raise LossOptionError(f"{key}={value!r} is not {what}; use one of {', '.join(choices)}.{hint}")


def check_agg_mode(mode: Any, key: str = "loss_agg_mode", allowed: tuple[str, ...] | None = None) -> str:
    """``mode`` if it is one of the aggregation modes (of ``allowed``, a loss's own subset), else a named error."""
    return _one_of(
        mode, allowed or LOSS_AGG_MODES, key, "an aggregation mode" + (" this loss supports" if allowed else "")
    )


def check_kl_kind(kind: Any, key: str = "kl_loss_type") -> str:
    """``kind`` if it names a KL estimator (optionally with the straight-through ``+``), else a named error."""
    return _one_of(kind, KL_KINDS + tuple(k + "+" for k in KL_KINDS), key, "a KL kind")


@dataclass
class LossContext:
    """What a policy loss receives: per-token tensors of shape ``(batch, tokens)`` and the run's settings.

    ``dp_size``, ``batch_num_tokens``, ``global_batch_size`` and ``loss_scale_factor`` are
    verl's global-batch information, so that a micro-batch's loss is normalised over the
    whole batch (None: this micro-batch is the whole batch).
    """

    log_probs: Any
    old_log_probs: Any
    advantages: Any
    response_mask: Any
    rollout_log_probs: Any = None
    ref_log_probs: Any = None
    rollout_is_weights: Any = None
    options: dict[str, Any] = field(default_factory=dict)
    agg_mode: str = "token-mean"
    dp_size: int = 1
    batch_num_tokens: Any = None
    global_batch_size: Any = None
    loss_scale_factor: Any = None
    name: str = ""

    def aggregate(self, per_token: Any, mode: str | None = None, mask: Any = None) -> Any:
        """``per_token`` reduced to a scalar by ``mode`` (default: the run's ``agg_mode``) over ``mask``."""
        return aggregate(
            per_token,
            self.response_mask if mask is None else mask,
            mode or self.agg_mode,
            dp_size=self.dp_size,
            batch_num_tokens=self.batch_num_tokens,
            global_batch_size=self.global_batch_size,
            loss_scale_factor=self.loss_scale_factor,
        )


def aggregate(
    per_token: Any,
    mask: Any,
    mode: str,
    *,
    dp_size: int = 1,
    batch_num_tokens: Any = None,
    global_batch_size: Any = None,
    loss_scale_factor: Any = None,
) -> Any:
    """A scalar from a ``(batch, tokens)`` loss matrix, with verl's semantics for each of its five modes.

    ``token-mean`` divides the masked sum by the batch's token count, ``token-sum`` keeps it;
    the ``seq-mean-*`` modes average per-sequence sums (or means) over sequences with at least
    one token, and ``seq-mean-token-sum-norm`` then divides by ``loss_scale_factor`` (default:
    the padded length). Every mode is multiplied by ``dp_size`` (ranks average gradients).
    """
    check_agg_mode(mode)
    mask = mask.to(per_token.dtype)
    if dp_size > 1 and (
        (mode == "token-mean" and batch_num_tokens is None)
        or (mode.startswith("seq-mean") and global_batch_size is None)
    ):
        needed = "batch_num_tokens" if mode == "token-mean" else "global_batch_size"
        raise LossOptionError(f"loss_agg_mode={mode!r} with dp_size={dp_size} needs the global {needed}.")
    if mode == "token-sum":
        return (per_token * mask).sum() * dp_size
    if mode == "token-mean":
        tokens = mask.sum() if batch_num_tokens is None else batch_num_tokens
        return (per_token * mask).sum() / tokens * dp_size
    counts = mask.sum(dim=-1)
    sums = (per_token * mask).sum(dim=-1)
    per_sequence = sums if mode != "seq-mean-token-mean" else sums / (counts + 1e-8)
    present = (counts > 0).to(per_token.dtype)
    sequences = present.sum() if global_batch_size is None else global_batch_size
    loss = (per_sequence * present).sum() / sequences * dp_size
    if mode == "seq-mean-token-sum-norm":
        loss = loss / (per_token.shape[-1] if loss_scale_factor is None else loss_scale_factor)
    return loss


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


class FixedKLController:
    """A KL coefficient that never changes (``kl_ctrl.type=fixed``)."""

    def __init__(self, kl_coef: float) -> None:
        self.value = float(kl_coef)

    def update(self, current_kl: float, n_steps: int) -> None:
        """Nothing to adapt."""


class AdaptiveKLController:
    """Ziegler et al.'s controller: moves the coefficient so the measured KL approaches ``target_kl``.

    Each update multiplies it by ``1 + clip(kl / target - 1, -0.2, 0.2) * n_steps / horizon``.
    """

    def __init__(self, init_kl_coef: float, target_kl: float, horizon: int) -> None:
        if not horizon > 0 or not target_kl > 0:
            raise LossOptionError(
                f"The adaptive KL controller needs a positive target_kl and horizon; got {target_kl!r}, {horizon!r}."
            )
        self.value = float(init_kl_coef)
        self.target = float(target_kl)
        self.horizon = int(horizon)

    def update(self, current_kl: float, n_steps: int) -> None:
        """Adapt the coefficient after ``n_steps`` samples with mean KL ``current_kl``."""
        error = min(max(current_kl / self.target - 1.0, -0.2), 0.2)
        self.value *= 1.0 + error * n_steps / self.horizon


def kl_controller(
    kind: str, kl_coef: float, target_kl: float = 0.1, horizon: int = 10000
) -> FixedKLController | AdaptiveKLController:
    """The controller ``kind`` (``fixed`` or ``adaptive``), as verl's ``kl_ctrl`` section configures it."""
    kind = _one_of(kind, ("fixed", "adaptive"), "kl_ctrl.type", "a KL controller")
    if kind == "fixed":
        return FixedKLController(kl_coef)
    return AdaptiveKLController(kl_coef, target_kl, horizon)


def truncated_is_weights(old_log_probs: Any, rollout_log_probs: Any, mask: Any, mode: str, cap: float) -> Any:
    """Truncated importance weights ``min(pi_old / pi_rollout, cap)`` per token or per sequence (no gradient).

    ``sequence`` uses the product of a sequence's token ratios (the sum of masked log-ratios),
    broadcast to its tokens. The log-ratio is clamped to ±20 so extreme rollouts stay finite.
    """
    import torch

    mode = _one_of(mode, TIS_MODES, "rllm.algorithm.rollout_correction.tis_mode", "a rollout-correction level")
    if not (isinstance(cap, int | float) and cap > 0):
        raise LossOptionError(f"rllm.algorithm.rollout_correction.tis_cap must be positive; got {cap!r}.")
    log_ratio = (old_log_probs - rollout_log_probs).detach() * mask
    if mode == "sequence":
        log_ratio = log_ratio.sum(dim=-1, keepdim=True).expand_as(old_log_probs)
    weights = torch.exp(torch.clamp(log_ratio, min=-20.0, max=20.0))
    return torch.clamp(weights, max=float(cap)) * mask


def _registry() -> Any:
    from rllm.plugins.manager import get_plugin_manager

    return get_plugin_manager().losses


def loss_names() -> list[str]:
    """Every registered loss name and alias."""
    return list(_registry().names())


def loss_entry(name: str) -> LossEntry:
    """The registration of loss ``name`` (an alias resolves to its own claim); unknown: a named error."""
    entry: LossEntry = _registry().resolve(name)
    return entry


def get_loss(name: str) -> LossFn:
    """The loss function registered as ``name``, imported on first use: call it with a :class:`LossContext`."""
    return loss_entry(name).load()


def resolve_loss_options(
    name: str, options: Mapping[str, Any] | None = None, agg_mode: str = "token-mean"
) -> tuple[LossEntry, dict[str, Any], str]:
    """Check a run's choice of loss before anything runs: the entry, every declared option, the mode.

    An option the loss does not declare, an ill-typed value or an aggregation mode it does not
    support is a one-line :class:`~rllm.errors.LossOptionError` naming the key and close matches.
    """
    entry = loss_entry(name)
    given = dict(options or {})
    declared = {o.name: o for o in entry.options}
    who = entry.source.describe()
    for key in given:
        if key not in declared:
            close = difflib.get_close_matches(key, list(declared), n=3, cutoff=0.5)
            hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
            takes = ", ".join(declared) or "no options"
            raise LossOptionError(f"Loss {name!r} ({who}) has no option {key!r}.{hint} It takes: {takes}.")
    resolved = {
        o.name: o.check(given[o.name], name, who, what="loss", error=LossOptionError) if o.name in given else o.default
        for o in entry.options
    }
    mode = check_agg_mode(agg_mode, "loss_agg_mode", entry.agg_modes)
    return entry, resolved, mode


def compute_policy_loss(
    name: str,
    *,
    log_probs: Any,
    old_log_probs: Any,
    advantages: Any,
    response_mask: Any,
    rollout_log_probs: Any = None,
    ref_log_probs: Any = None,
    rollout_is_weights: Any = None,
    options: Mapping[str, Any] | None = None,
    agg_mode: str = "token-mean",
    kl_coef: float = 0.0,
    kl_kind: str = "low_var_kl",
    tis_mode: str | None = None,
    tis_cap: float = 2.0,
    dp_size: int = 1,
    batch_num_tokens: Any = None,
    global_batch_size: Any = None,
    loss_scale_factor: Any = None,
) -> tuple[Any, dict[str, float]]:
    """Loss ``name`` on one batch, with the KL term and rollout correction a run configures.

    Options, mode, KL kind and rollout-correction level are checked first (named one-line
    errors). With ``kl_coef > 0`` the aggregated ``kl_penalty(log_probs, ref_log_probs,
    kl_kind)`` times ``kl_coef`` is added (verl's ``use_kl_loss``); with ``tis_mode`` the
    truncated weights of ``old_log_probs`` against ``rollout_log_probs`` reach the loss as
    ``ctx.rollout_is_weights`` (or give weights computed elsewhere as ``rollout_is_weights``,
    as verl does).
    """
    entry, resolved, mode = resolve_loss_options(name, options, agg_mode)
    if kl_coef:
        check_kl_kind(kl_kind)
        if not (isinstance(kl_coef, int | float) and math.isfinite(kl_coef) and kl_coef >= 0):
            raise LossOptionError(f"kl_coef must be a non-negative number; got {kl_coef!r}.")
        if ref_log_probs is None:
            raise LossOptionError("kl_coef > 0 needs ref_log_probs (the reference policy's log-probs).")
    weights = rollout_is_weights
    if tis_mode is not None:
        if rollout_log_probs is None:
            raise LossOptionError(
                "rllm.algorithm.rollout_correction.tis_mode needs rollout_log_probs (the sampler's log-probs)."
            )
        weights = truncated_is_weights(old_log_probs, rollout_log_probs, response_mask, tis_mode, tis_cap)
    ctx = LossContext(
        log_probs=log_probs,
        old_log_probs=old_log_probs,
        advantages=advantages,
        response_mask=response_mask,
        rollout_log_probs=rollout_log_probs,
        ref_log_probs=ref_log_probs,
        rollout_is_weights=weights,
        options=resolved,
        agg_mode=mode,
        dp_size=dp_size,
        batch_num_tokens=batch_num_tokens,
        global_batch_size=global_batch_size,
        loss_scale_factor=loss_scale_factor,
        name=name,
    )
    loss, metrics = entry.load()(ctx)
    metrics = dict(metrics)
    if kl_coef:
        kl = ctx.aggregate(kl_penalty(log_probs, ref_log_probs, kl_kind))
        loss = loss + kl_coef * kl
        metrics["kl_loss"] = float(kl.detach())
        metrics["kl_coef"] = float(kl_coef)
    return loss, metrics


@dataclass(frozen=True)
class LossSettings:
    """What a torch backend passes to :func:`compute_policy_loss` for one role, checked before a run starts.

    Built from a run's ``rllm.algorithm`` section by :meth:`from_algorithm`: the role's loss
    (``loss_fn_map``, else ``loss_fn``, else ``default``), ``loss_options`` over rLLM's
    ``eps_clip``/``eps_clip_high`` (as ``clip_ratio``/``clip_ratio_high`` for a loss that
    declares them), ``loss_agg_mode`` (else ``token-mean``), the KL term (``use_kl_loss``,
    ``kl_beta``, ``kl_loss_type``) and rollout correction (``tis_mode``, ``tis_cap``).
    """

    name: str
    options: dict[str, Any]
    agg_mode: str
    kl_coef: float = 0.0
    kl_kind: str = "low_var_kl"
    tis_mode: str | None = None
    tis_cap: float = 2.0

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
        _, options, mode = resolve_loss_options(name, given, algorithm.loss_agg_mode or "token-mean")
        kl_kind = check_kl_kind(algorithm.kl_loss_type, "rllm.algorithm.kl_loss_type")
        correction = algorithm.rollout_correction
        return cls(
            name=name,
            options=options,
            agg_mode=mode,
            kl_coef=float(algorithm.kl_beta) if algorithm.use_kl_loss else 0.0,
            kl_kind=kl_kind,
            tis_mode=correction.tis_mode,
            tis_cap=float(correction.tis_cap),
        )

    def compute(self, **tensors: Any) -> tuple[Any, dict[str, float]]:
        """:func:`compute_policy_loss` with these settings on ``log_probs=..., old_log_probs=..., ...``."""
        return compute_policy_loss(
            self.name,
            options=self.options,
            agg_mode=self.agg_mode,
            kl_coef=self.kl_coef,
            kl_kind=self.kl_kind,
            tis_mode=self.tis_mode,
            tis_cap=self.tis_cap,
            **tensors,
        )


from rllm.losses.kl_reward import KLInReward, batch_mean_kl, inactive_kl_keys  # noqa: E402  (it builds on the names above)
