"""What a :class:`rllm_verl.worker.VerlWorker` is built with: its options, the loss groups of an update, and verl's
actor config for one loss (``rllm.<loss>`` inside verl's ``ppo_loss``), checked by rllm before verl sees it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from rllm.errors import ConfigError
from rllm.losses import LossSettings, resolve_loss_options
from rllm_verl.losses_in_verl import PREFIX


@dataclass
class WorkerOptions:
    """The worker's optimizer, batching and loss settings (rllm's names; defaults are the transformers backend's)."""

    lr: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.999)
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    micro_batches: int = 1
    """Gradient-accumulation chunks per update on each rank (verl's ``micro_batch_size_per_gpu`` follows)."""
    micro_batch_size: int | None = None
    """Rows per micro-batch on each rank (verl's ``ppo_micro_batch_size_per_gpu``); set, it overrides micro_batches."""
    loss: str = "vanilla"
    loss_agg_mode: str | None = None
    """None: ``token-mean``, or the mode the loss fixes (``sapo``, ``geo_mean``)."""
    loss_options: dict[str, Any] = field(default_factory=dict)
    """The loss's options by rllm's names (``clip_ratio_high``, ``dro_beta``, ...), set on verl's actor config."""
    attn_implementation: str = "sdpa"
    kl_coef: float = 0.0
    """Above 0: verl's ``use_kl_loss`` with this ``kl_loss_coef`` (the update then needs the reference's log-probs)."""
    kl_kind: str = "low_var_kl"
    """verl's ``kl_loss_type`` (rllm's ``kl_loss_type``: the same kinds)."""
    entropy_coeff: float = 0.0
    """Above 0: verl's entropy bonus (``entropy_coeff``; the update computes the entropy)."""
    reference: bool = False
    """verl's ``ref`` role: a frozen, forward-only worker (no optimizer) that only scores; the rest is unused."""
    other_losses: list[LossChoice] = field(default_factory=list)
    """The losses roles are routed to besides ``loss`` (``loss_fn_map``): checked when the worker is built."""

    @property
    def own_loss(self) -> LossChoice:
        return LossChoice(self.loss, self.loss_agg_mode, dict(self.loss_options))


@dataclass(frozen=True)
class LossChoice:
    """One policy loss as rllm names it: the loss, its aggregation (None: its default) and its options."""

    name: str
    agg_mode: str | None = None
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.name}|{self.agg_mode}|{sorted(self.options.items())!r}"


def loss_choice(settings: LossSettings) -> LossChoice:
    """A role's loss settings as the worker's loss choice (the KL, entropy and correction terms are the run's)."""
    return LossChoice(settings.name, settings.agg_mode, dict(settings.options or {}))


@dataclass
class UpdateGroup:
    """Rows of one mini-batch that one loss trains (the rows of the roles routed to it), at rllm's positions."""

    ids: torch.Tensor
    attention: torch.Tensor
    mask: torch.Tensor
    old_log_probs: torch.Tensor
    advantages: torch.Tensor
    loss: LossChoice | None = None
    """None: the worker's own loss (``WorkerOptions.loss``)."""
    ref_log_probs: torch.Tensor | None = None
    rollout_is_weights: torch.Tensor | None = None
    """Rollout correction's truncated importance weights (verl passes them to the policy loss)."""
    counted: torch.Tensor | None = None
    """The response tokens the loss counts (rollout rejection takes some out); None: all of ``mask``."""


def shim_trl() -> None:
    """verl 0.9.1 patches TRL's value-head model when TRL imports; TRL 1.x no longer has it, so skip the patch."""
    import importlib

    import verl.models.transformers.monkey_patch as patches

    if not patches.is_trl_available():
        return
    for module in ("trl", "trl.experimental.ppo"):
        try:
            if hasattr(importlib.import_module(module), "AutoModelForCausalLMWithValueHead"):
                return
        except ImportError:
            continue
    patches.is_trl_available = lambda: False  # type: ignore[attr-defined]


def actor_config(options: WorkerOptions, choice: LossChoice | None = None) -> Any:
    """verl's actor config holding the loss (``rllm.<loss>``; ``choice``, else the options' own), its aggregation and
    options, checked by rllm first; the KL and entropy terms from ``options``."""
    from verl.workers.config import FSDPActorConfig, PolicyLossConfig

    choice = options.own_loss if choice is None else choice
    _, _, mode = resolve_loss_options(choice.name, choice.options, choice.agg_mode, "loss_agg_mode")
    if mode == "prompt-mean":
        raise ConfigError(
            "loss_agg_mode='prompt-mean' needs each sequence's prompt, which verl's policy losses are not given; "
            "choose one of verl's modes (token-mean, seq-mean-token-mean, ...)."
        )

    actor_fields = set(FSDPActorConfig.__dataclass_fields__)
    loss_fields = set(PolicyLossConfig.__dataclass_fields__) - {"loss_mode", "rollout_correction"}
    on_actor = {k: v for k, v in choice.options.items() if k in actor_fields}
    on_loss = {k: v for k, v in choice.options.items() if k in loss_fields}
    unknown = sorted(set(choice.options) - set(on_actor) - set(on_loss))
    if unknown:
        carried = sorted(loss_fields | {"clip_ratio", "clip_ratio_low", "clip_ratio_high", "clip_ratio_c"})
        raise ConfigError(
            f"Loss option {unknown[0]!r} has no place in verl's actor config (actor or policy_loss); the options "
            f"verl can carry are {', '.join(carried)}."
        )
    policy_loss = PolicyLossConfig(loss_mode=PREFIX + choice.name, **on_loss)
    return FSDPActorConfig(
        strategy="fsdp2",
        rollout_n=1,
        ppo_micro_batch_size_per_gpu=1,  # the harness sets the micro-batch size of each call
        loss_agg_mode=mode,
        policy_loss=policy_loss,
        use_torch_compile=False,
        use_kl_loss=options.kl_coef > 0,
        kl_loss_coef=options.kl_coef,
        kl_loss_type=options.kl_kind,
        entropy_coeff=options.entropy_coeff,
        **on_actor,
    )
