"""rLLM's ``sync_config``: a config in verl's own layout and its ``rllm.*`` keys kept equal, by rLLM's precedence.

For each pair of :data:`SHARED_KEYS` (verl's path, rllm's path): the rllm key set on the command
line wins; else verl's key set on the command line wins, with a warning that the verl-side path is
deprecated; else rllm's configured value, unless it is None (then verl's stands). Both sides end
equal. Derived keys follow: ``trainer.total_training_steps`` from ``rllm.trainer.total_batches``
(<= 0 is None), ``actor.use_kl_loss`` from ``kl_beta > 0`` unless set, the clip ratios from
``eps_clip``/``eps_clip_high`` (``clip_ratio_low`` before ``clip_ratio`` on verl's side), the
scheduler type from ``rllm.algorithm.lr_schedule``.

Every rllm path here is a key of this project's config (tested). rLLM also pairs
``rllm.rollout.train/val.*`` and ``rllm.data.max_*_length``, which this project refuses as keys
of rLLM's launcher (docs/compat.md), and toggles verl's separated (async) mode, which rllm's own
asynchronous training replaces; those are left out.
"""

from __future__ import annotations

import logging
from typing import Any

from omegaconf import DictConfig, OmegaConf

logger = logging.getLogger("rllm.trainer.verl.utils")  # rLLM's logger name, which its users filter on

SHARED_KEYS: tuple[tuple[str, str], ...] = (
    ("algorithm.adv_estimator", "rllm.algorithm.adv_estimator"),
    ("algorithm.norm_adv_by_std_in_grpo", "rllm.algorithm.norm_adv_by_std_in_grpo"),
    ("algorithm.rollout_correction.bypass_mode", "rllm.algorithm.rollout_correction.bypass_mode"),
    ("algorithm.rollout_correction.rollout_is", "rllm.algorithm.rollout_correction.tis_mode"),
    ("algorithm.rollout_correction.rollout_is_threshold", "rllm.algorithm.rollout_correction.tis_cap"),
    ("actor_rollout_ref.actor.kl_loss_coef", "rllm.algorithm.kl_beta"),
    ("actor_rollout_ref.actor.policy_loss.loss_mode", "rllm.algorithm.loss_fn"),
    ("actor_rollout_ref.actor.loss_agg_mode", "rllm.algorithm.loss_agg_mode"),
    ("actor_rollout_ref.actor.optim.lr_warmup_steps", "rllm.algorithm.warmup_steps"),
    ("actor_rollout_ref.actor.optim.lr_warmup_steps_ratio", "rllm.algorithm.warmup_steps_ratio"),
    ("actor_rollout_ref.actor.clip_ratio_high", "rllm.algorithm.eps_clip_high"),
    ("actor_rollout_ref.actor.router_replay.mode", "rllm.algorithm.router_replay"),
    ("actor_rollout_ref.rollout.n", "rllm.rollout.n"),
    ("actor_rollout_ref.rollout.val_kwargs.n", "rllm.rollout.n_val"),
    ("trainer.save_freq", "rllm.trainer.save_freq"),
    ("trainer.test_freq", "rllm.trainer.test_freq"),
    ("trainer.val_before_train", "rllm.trainer.val_before_train"),
    ("trainer.val_only", "rllm.trainer.val_only"),
    ("trainer.total_epochs", "rllm.trainer.total_epochs"),
    ("trainer.logger", "rllm.trainer.logger"),
    ("trainer.project_name", "rllm.trainer.project_name"),
    ("trainer.experiment_name", "rllm.trainer.experiment_name"),
    ("data.train_batch_size", "rllm.data.train_batch_size"),
)
"""(verl's path, rllm's path) of each setting both layouts hold."""
TOTAL_STEPS = ("trainer.total_training_steps", "rllm.trainer.total_batches")
EPS_CLIP, EPS_CLIP_HIGH = "rllm.algorithm.eps_clip", "rllm.algorithm.eps_clip_high"
CLIP, CLIP_LOW, CLIP_HIGH = (f"actor_rollout_ref.actor.clip_ratio{end}" for end in ("", "_low", "_high"))
SCHEDULER_KEYS = ("lr_scheduler_type", "lr_decay_style", "decay_type")
"""The names verl's optimizer configs (FSDP, Megatron, ...) give the schedule."""


def _explicit_override_keys(hydra_overrides: list[str] | None = None) -> set[str]:
    """The dotted paths set on the command line: ``key=value`` overrides given, else Hydra's own, else none."""
    if hydra_overrides is None:
        try:
            from hydra.core.hydra_config import HydraConfig

            hydra_overrides = list(HydraConfig.get().overrides.task)
        except (ImportError, ValueError, AttributeError):  # no Hydra, or not inside a Hydra app
            return set()
    return {item.split("=", 1)[0].lstrip("+~") for item in hydra_overrides if "=" in item}


def _plain(value: Any) -> Any:
    return OmegaConf.to_container(value, resolve=False) if OmegaConf.is_config(value) else value


class _Sync:
    """One ``sync_config`` call: the config, what was set explicitly, and the warnings."""

    def __init__(self, config: DictConfig, explicit: set[str]) -> None:
        self.config, self.explicit = config, explicit

    def get(self, path: str) -> Any:
        return OmegaConf.select(self.config, path)

    def put(self, path: str, value: Any) -> None:
        OmegaConf.update(self.config, path, value, merge=False)

    def warn(self, verl: str, rllm: str, conflict: bool = False) -> None:
        """The verl-side path was set on the command line: say it is deprecated (and lost, when it conflicts)."""
        if verl not in self.explicit:
            return
        if conflict:
            message = "%s conflicts with %s; using %s. Set it as %s=... (the verl path is deprecated)."
            logger.warning(message, verl, rllm, rllm, rllm)
        else:
            logger.warning("%s is deprecated and will be removed; set %s=... instead.", verl, rllm)

    def pair(self, verl: str, rllm: str, to_verl: Any = None, to_rllm: Any = None) -> None:
        """One shared setting by the precedence of the module docstring (``to_*`` convert a value across)."""
        to_verl, to_rllm = to_verl or (lambda v: v), to_rllm or (lambda v: v)
        if rllm in self.explicit:
            value = to_verl(self.get(rllm))
            self.warn(verl, rllm, conflict=_plain(self.get(verl)) != _plain(value))
            self.put(verl, value)
        elif verl in self.explicit:
            self.warn(verl, rllm)
            self.put(rllm, to_rllm(self.get(verl)))
        elif (value := self.get(rllm)) is not None or verl == TOTAL_STEPS[0]:
            self.put(verl, to_verl(value))

    def clip(self) -> None:
        """``eps_clip`` is verl's lower bound (``clip_ratio_low``, else ``clip_ratio``); ``eps_clip_high``, else
        ``eps_clip``, its upper one."""
        if EPS_CLIP in self.explicit:
            eps = self.get(EPS_CLIP)
            for verl in (CLIP_LOW, CLIP):
                self.warn(verl, EPS_CLIP, conflict=_plain(self.get(verl)) != eps)
        elif verl := next((p for p in (CLIP_LOW, CLIP) if p in self.explicit), None):
            for path in (CLIP_LOW, CLIP):
                self.warn(path, EPS_CLIP)
            self.put(EPS_CLIP, self.get(verl))
        eps = self.get(EPS_CLIP)
        if eps is not None and (EPS_CLIP in self.explicit or not {CLIP_LOW, CLIP} & self.explicit):
            self.put(CLIP, eps)
            self.put(CLIP_LOW, eps)
        high = self.get(EPS_CLIP_HIGH)
        if (high := eps if high is None else high) is not None:
            self.put(CLIP_HIGH, high)


def sync_config(config: DictConfig, hydra_overrides: list[str] | None = None) -> None:
    """Make verl's keys and their ``rllm.*`` twins equal, in place (module docstring); ``hydra_overrides``: the
    command line's ``key=value`` items when Hydra's own are not at hand (inside a Ray actor)."""
    sync = _Sync(config, _explicit_override_keys(hydra_overrides))
    for verl, rllm in SHARED_KEYS:
        sync.pair(verl, rllm)
    optim = sync.get("actor_rollout_ref.actor.optim")
    scheduler = next((key for key in SCHEDULER_KEYS if optim is not None and key in optim), None)
    if scheduler is not None:
        sync.pair(f"actor_rollout_ref.actor.optim.{scheduler}", "rllm.algorithm.lr_schedule")
    sync.pair(*TOTAL_STEPS, lambda v: None if v is None or v <= 0 else v, lambda v: -1 if v is None else v)
    if "actor_rollout_ref.actor.use_kl_loss" not in sync.explicit:
        sync.put("actor_rollout_ref.actor.use_kl_loss", (sync.get("rllm.algorithm.kl_beta") or 0.0) > 0)
    if sync.get("rllm.algorithm.router_replay") == "R3":  # rLLM's R3 records routing while sampling
        sync.put("actor_rollout_ref.rollout.enable_rollout_routing_replay", True)
    sync.clip()


__all__ = ["SHARED_KEYS", "_explicit_override_keys", "sync_config"]
