"""rllm policy losses as verl policy losses: ``actor_rollout_ref.actor.policy_loss.loss_mode=rllm.<name>``.

verl calls a policy loss as ``fn(old_log_prob, log_prob, advantages, response_mask,
loss_agg_mode, config, rollout_is_weights)``. The adapter reads each option the rllm loss
declares from verl's actor config (``clip_ratio*``, ``tau_*`` on the actor, the others on
``policy_loss``; an option verl's config has no field for keeps its declared default), checks
them and the mode through :func:`rllm.losses.compute_policy_loss`, passes verl's
``global_batch_info`` on as the global-batch normalisation, and returns verl's metric names
(``actor/`` prefixed). A loss that fixes its own aggregation (``sapo``, ``geo_mean``) takes
verl's ``loss_agg_mode`` as verl's own versions do, by leaving it aside, and says so once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import rllm
from rllm.errors import LossOptionError
from rllm.losses import compute_policy_loss, resolve_loss_options

PREFIX = "rllm."
MODE_KEY = "actor_rollout_ref.actor.loss_agg_mode"
GLOBAL_BATCH_KEYS = ("dp_size", "batch_num_tokens", "global_batch_size", "loss_scale_factor")

_adapters: dict[str, Callable[..., Any]] = {}


def register_losses_in_verl() -> list[str]:
    """Register every rllm loss (and alias) in verl's policy-loss registry as ``rllm.<name>``; returns the names."""
    from verl.trainer.ppo.core_algos import register_policy_loss

    registered = []
    for name in rllm.get_plugin_manager().losses.names():
        adapter = _adapters.get(name)
        if adapter is None:
            adapter = _adapters[name] = make_loss_adapter(name)
        register_policy_loss(PREFIX + name)(adapter)
        registered.append(PREFIX + name)
    return registered


def _verl_option(config: Any, option: str) -> Any:
    """The value verl's actor config holds for ``option`` (actor level first, then ``policy_loss``), or None."""
    for section in (config, getattr(config, "policy_loss", None)):
        if section is None:
            continue
        fields = getattr(section, "__dataclass_fields__", None)
        if fields is not None:
            if option in fields:
                return getattr(section, option)
        elif (isinstance(section, Mapping) or hasattr(section, "_metadata")) and option in section:  # dict, DictConfig
            return section[option]
    return None


def make_loss_adapter(name: str) -> Callable[..., Any]:
    """A function with verl's policy-loss signature that runs rllm's loss ``name``."""

    def policy_loss(
        old_log_prob: Any,
        log_prob: Any,
        advantages: Any,
        response_mask: Any,
        loss_agg_mode: str = "token-mean",
        config: Any = None,
        rollout_is_weights: Any = None,
    ) -> tuple[Any, dict[str, Any]]:
        entry = rllm.get_plugin_manager().losses.resolve(name)
        given = {o.name: value for o in entry.options if (value := _verl_option(config, o.name)) is not None}
        own = entry.agg_modes is not None and loss_agg_mode not in entry.agg_modes
        _, _, mode = resolve_loss_options(name, given, None if own else loss_agg_mode, MODE_KEY)
        if mode == "prompt-mean":
            raise LossOptionError(
                f"{MODE_KEY}='prompt-mean' needs each sequence's prompt, which verl's policy loss functions are "
                "not given; choose one of verl's modes (token-mean, seq-mean-token-mean, ...)."
            )
        batch = dict(getattr(config, "global_batch_info", None) or {})
        loss, metrics = compute_policy_loss(
            name,
            log_probs=log_prob,
            old_log_probs=old_log_prob,
            advantages=advantages,
            response_mask=response_mask,
            rollout_is_weights=rollout_is_weights,
            options=given,
            agg_mode=mode,
            **{key: batch[key] for key in GLOBAL_BATCH_KEYS if batch.get(key) is not None},
        )
        return loss, {f"actor/{key}": value for key, value in metrics.items()}

    policy_loss.__name__ = policy_loss.__qualname__ = f"rllm_loss_{name}"
    policy_loss.__doc__ = f"rllm's policy loss {name!r} run by verl (see rllm_verl.losses_in_verl)."
    return policy_loss
