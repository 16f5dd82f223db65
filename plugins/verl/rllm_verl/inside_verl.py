"""rllm estimators as verl advantage estimators: ``algorithm.adv_estimator=rllm.<name>``.

verl calls an advantage estimator with token-level rewards ``(batch, response_length)``, the
response mask, the group labels ``index`` (the batch's ``uid``), the algorithm config and, when
its batch has them, ``reward_baselines``. The adapter sums each response's token rewards over its
whole row into one score, as verl's estimators do (a NaN or inf outside the mask is padding and
ignored), takes response lengths from the mask (its non-zero entries), runs the rllm estimator through rllm's one
invocation pipeline (options, rewards and outputs are checked exactly as in rllm), and returns
the advantages broadcast over the mask, in verl's dtype and on verl's device, as both advantages
and returns (the outcome estimators of verl do the same; for ``reinforce_plus_plus`` and ``remax``
``returns`` is the reward-to-go, and for the optimal token baselines the masked rewards summed to
the row's end, as verl's namesakes give).

Estimator options come from the algorithm config under :data:`OPTIONS_KEY`
(``algorithm.rllm_options``); verl's own ``norm_adv_by_std_in_grpo``, ``gamma`` and ``lam``
reach the estimators that declare them, as rllm's run-level settings do.

A stateful estimator (``rllm.ema_baseline``) keeps its state across verl's steps in
:data:`ESTIMATOR_STATES`, in the process that computes advantages (verl's driver). verl's
checkpoints do not hold it: save ``ESTIMATOR_STATES.state_dict()`` beside them and
``load_state_dict`` it on resume, or the first step after a resume starts the state afresh.
Its group labels are verl's uids, fresh for every prompt at every step under verl's trainer, so
a state kept per task (``key: task``) carries nothing over: the adapter warns once.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

import rllm
from rllm.errors import ConfigError, MissingInputError, RLLMWarning
from rllm.toolkit import (
    TOKEN_FIELDS,
    AdvantageBatch,
    EstimatorStates,
    FloatArray,
    Ragged,
    resolve_plugins,
    run_estimator,
)

if TYPE_CHECKING:
    import torch

PREFIX = "rllm."
"""verl sees rllm's estimator ``maxrl`` as ``rllm.maxrl``."""
OPTIONS_KEY = "rllm_options"
"""Key of the algorithm config holding the rllm estimator's options (``algorithm.rllm_options``)."""
BRIDGED_PREFIX = "verl."
"""verl's own estimators as rllm sees them (:mod:`rllm_verl.inside_rllm`): never sent back to verl."""
RUN_SETTINGS = ("norm_adv_by_std_in_grpo", "gamma", "lam")
"""verl algorithm settings passed to rllm estimators that declare them."""
FROM_VERL = {
    "response_lengths": "the response mask",
    "baseline_rewards": "reward_baselines (the batch's greedy-rollout rewards, as for verl's remax)",
    "step_rewards": "token_level_rewards over the mask (one step per response token)",
    "step_values": "values over the mask, as verl's gae is called with them (the critic's, one per response token)",
    "old_log_probs": "old_log_probs over the mask (the batch's old_log_probs, as verl's optimal_token_baseline gets)",
    "sum_pi_squared": "sum_pi_squared over the mask (actor.calculate_sum_pi_squared=True)",
    "rollout_log_probs": "rollout_log_probs over the mask (the batch's rollout_log_probs)",
    "entropy": "entropys over the mask (the actor's per-token entropy)",
}
"""The rllm batch fields an adapter can fill, and what of verl's input fills them."""

NEVER_PASSED = "verl does not pass it to advantage estimators; run this estimator with rllm's trainer"
NOT_PASSED = {
    "baseline_rewards": "verl's trainer fills reward_baselines only for its own algorithm.adv_estimator=remax",
    "step_values": (
        "verl's trainer passes the critic's values only to its own algorithm.adv_estimator=gae, so use gae there "
        "(rllm.gae takes values= when called as verl's gae is)"
    ),
    "old_log_probs": (
        "verl's trainer passes old_log_probs and sum_pi_squared only to its own optimal_token_baseline and "
        "tir_optimal_token_baseline (with actor.calculate_sum_pi_squared=True), so use those names there"
    ),
}
NOT_PASSED["sum_pi_squared"] = NOT_PASSED["old_log_probs"]
"""Why a field an rllm estimator needs is missing from verl's call, and what to do instead."""

RETURNS_TO_GO = ("reinforce_plus_plus", "remax")
"""Estimators whose verl namesakes return the (discounted) reward-to-go as ``returns``, not the advantages."""

SUMMED_TO_END = ("optimal_token_baseline", "tir_optimal_token_baseline")
"""Estimators whose verl namesakes return each token's masked rewards summed to the row's end as ``returns``."""

RAW_GAE = {"normalize": False}
"""rllm gae's options for the advantages before whitening, of which verl's gae makes the critic's returns."""

STATE_ROLE = "verl"
"""The role under which :data:`ESTIMATOR_STATES` keeps each estimator's state (verl has no roles)."""
ESTIMATOR_STATES = EstimatorStates()
"""The states of stateful rllm estimators run by verl in this process, kept from one step to the next."""

VerlEstimatorFn = Callable[..., "tuple[torch.Tensor, torch.Tensor]"]
_adapters: dict[str, VerlEstimatorFn] = {}


def register_in_verl() -> list[str]:
    """Register every rllm estimator in verl's registry as ``rllm.<name>``; returns the verl names.

    The ``verl.plugins`` entry point runs this whenever verl is imported, in every process
    (driver and Ray workers) that has rllm installed. Call it yourself after registering an
    estimator in code once verl is imported, or where verl's plugin discovery is switched off
    (``VERL_USE_EXTERNAL_PLUGINS=none``). Calling it again is harmless.
    """
    from verl.trainer.ppo.core_algos import register_adv_est

    registered = []
    for name in rllm.get_plugin_manager().estimators.names():
        if name.startswith(BRIDGED_PREFIX):
            continue
        adapter = _adapters.get(name)
        if adapter is None:
            adapter = _adapters[name] = make_adapter(name)
        register_adv_est(PREFIX + name)(adapter)
        registered.append(PREFIX + name)
    return registered


def make_adapter(name: str) -> VerlEstimatorFn:
    """A function with verl's advantage-estimator signature that runs rllm's estimator ``name``."""

    def estimator(
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        index: np.ndarray | None = None,
        config: Any = None,
        reward_baselines: torch.Tensor | None = None,
        values: torch.Tensor | None = None,
        gamma: float | None = None,
        lam: float | None = None,
        old_log_probs: torch.Tensor | None = None,
        sum_pi_squared: torch.Tensor | None = None,
        rollout_log_probs: torch.Tensor | None = None,
        entropys: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        direct = {key: float(value) for key, value in (("gamma", gamma), ("lam", lam)) if value is not None}
        given = {
            "old_log_probs": old_log_probs,
            "sum_pi_squared": sum_pi_squared,
            "rollout_log_probs": rollout_log_probs,
            "entropy": entropys,
        }
        tokens = {field: tensor for field, tensor in given.items() if tensor is not None}
        advantages = run_for_verl(
            name, token_level_rewards, response_mask, index, config, reward_baselines, values, direct, tokens=tokens
        )
        if name == "gae" and values is not None:  # as verl's gae: the critic's targets, before whitening
            raw = run_for_verl(
                name, token_level_rewards, response_mask, index, config, reward_baselines, values, direct, RAW_GAE
            )
            return advantages, (raw + values) * (response_mask != 0)
        if name in SUMMED_TO_END:  # as verl's own optimal token baselines return
            return advantages, summed_to_end(token_level_rewards, response_mask)
        if name in RETURNS_TO_GO:  # as verl's own reinforce_plus_plus and remax return
            discount = float(direct.get("gamma", _setting(config, "gamma") or 1.0))
            return advantages, reward_to_go(
                token_level_rewards, response_mask, discount if name == "reinforce_plus_plus" else 1.0
            )
        return advantages, advantages

    estimator.__name__ = estimator.__qualname__ = f"rllm_{name}"
    estimator.__doc__ = f"rllm's estimator {name!r} run by verl (see rllm_verl.inside_verl)."
    return estimator


def run_for_verl(
    name: str,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray | None,
    config: Any,
    reward_baselines: torch.Tensor | None,
    values: torch.Tensor | None = None,
    direct: Mapping[str, float] | None = None,
    fixed: Mapping[str, Any] | None = None,
    tokens: Mapping[str, torch.Tensor] | None = None,
) -> torch.Tensor:
    """Advantages of rllm's estimator ``name`` on verl's inputs, shaped and typed like ``token_level_rewards``.

    ``values`` and ``direct`` (``gamma``, ``lam``) are what verl's gae is called with instead of a
    config; such a call has no group labels, so without ``index`` each response is its own group.
    ``fixed`` options override the configured ones. ``tokens`` holds the per-token fields
    (``old_log_probs``, ``sum_pi_squared``, ...) taken from verl's batch, one tensor each shaped
    like ``token_level_rewards``.
    """
    import torch

    resolved = resolve_plugins(name)  # the one lookup of this call: the estimator, kernels, declared fields
    entry = resolved.entry()
    missing = [field for field in entry.requires if field not in FROM_VERL]
    if "baseline_rewards" in entry.requires and reward_baselines is None:
        missing.append("baseline_rewards")
    if "step_values" in entry.requires and values is None:
        missing.append("step_values")
    tokens = dict(tokens or {})
    missing += [field for field in entry.requires if field in TOKEN_FIELDS and field not in tokens]
    if missing:
        reasons = sorted({NOT_PASSED.get(field, NEVER_PASSED) for field in missing})
        raise MissingInputError(
            f"rllm estimator {name!r} needs {', '.join(map(repr, missing))}, which this call from verl did not "
            f"pass: {'; '.join(reasons)}."
        )
    if index is None and values is not None:
        index = np.arange(token_level_rewards.shape[0])
    if index is None:
        raise MissingInputError(
            f"rllm estimator {name!r} needs group labels, which verl passes as 'index' from the batch's "
            "non_tensor_batch['uid']; this batch has no 'uid'."
        )
    options, ambient = settings(config)
    ambient.update(direct or {})
    options.update(fixed or {})
    with torch.no_grad():
        # verl scores a response by its whole row; a NaN or inf on a token outside the mask is padding junk.
        on_mask = response_mask != 0
        kept = torch.where(on_mask | torch.isfinite(token_level_rewards), token_level_rewards, 0.0)
        batch = AdvantageBatch(
            _numpy(kept.sum(dim=-1)),
            np.asarray(index),
            baseline_rewards=None if reward_baselines is None else _numpy(reward_baselines.reshape(-1)),
            sources={  # built only for an estimator that reads them
                "response_lengths": lambda: _numpy(on_mask.sum(dim=-1)),
                "step_rewards": lambda: _token_rows(token_level_rewards, response_mask),
                **({} if values is None else {"step_values": lambda: _token_rows(values, response_mask)}),
                **{field: partial(_token_rows, tensor, response_mask, True) for field, tensor in tokens.items()},
            },
            kernels=resolved.kernels,
            fields=resolved.fields,
        )
        state = ESTIMATOR_STATES.get(name, entry.target, STATE_ROLE)
        if state is not None:
            _warn_if_keyed_by_uid(entry, options)
        advantages = run_estimator(entry, batch, options, ambient=ambient, state=state)
        return broadcast(advantages, token_level_rewards, response_mask)


_warned_uid_keys: set[str] = set()


def _warn_if_keyed_by_uid(entry: Any, options: Mapping[str, Any]) -> None:
    """Warn once when a stateful estimator keys its state per task: verl's trainer draws fresh uids every step."""
    option = entry.declaration.find("key")
    if option is None or options.get("key", option.default) != "task" or entry.name in _warned_uid_keys:
        return
    _warned_uid_keys.add(entry.name)
    warnings.warn(
        f"rllm.{entry.name} keeps its state per task, and inside verl its tasks are the batch's uids, which "
        "verl's trainer draws afresh for every prompt at every step: no baseline carries over and the state "
        f"grows each step. Set algorithm.rllm_options.key=role for one baseline over the run.",
        RLLMWarning,
        stacklevel=2,
    )


def settings(config: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The estimator options (``algorithm.rllm_options``) and run-level settings of verl's algorithm config."""
    from omegaconf import OmegaConf

    from rllm.config import check_expansion

    if config is None:
        return {}, {}
    if OmegaConf.is_config(config):
        check_expansion(config)  # an interpolation bomb in rllm_options is refused by key, not expanded
    raw = _options_section(config)
    options = _plain(raw) if raw is not None else {}
    if not isinstance(options, Mapping):
        raise ConfigError(
            f"algorithm.{OPTIONS_KEY} must be a mapping of rllm estimator options, e.g. "
            f"{{preset: verl}}; got {type(raw).__name__} {raw!r}."
        )
    ambient = {key: _plain(_setting(config, key)) for key in RUN_SETTINGS if _setting(config, key) is not None}
    return dict(options), ambient


def _options_section(config: Any) -> Any:
    """``algorithm.rllm_options``, with keys written dotted in verl's algorithm section (``rllm_options.preset``)."""
    from rllm.config import nest_dotted

    raw = _setting(config, OPTIONS_KEY)
    if not hasattr(config, "keys"):
        return raw
    ours = {key: config[key] for key in config if str(key).startswith(OPTIONS_KEY + ".")}
    if not ours:
        return raw
    ours[OPTIONS_KEY] = _plain(raw) if raw is not None else {}
    nested = nest_dotted(ours, frozenset({OPTIONS_KEY}), "verl's algorithm config")
    return (nested or ours)[OPTIONS_KEY]


def _setting(config: Any, key: str) -> Any:
    """``config[key]`` of verl's algorithm config (a DictConfig, a dict or a plain namespace), None if unset."""
    if config is None:
        return None
    return config.get(key) if hasattr(config, "get") else getattr(config, key, None)


def reward_to_go(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, gamma: float) -> torch.Tensor:
    """Each masked token's discounted sum of the rewards from it to the end; tokens outside the mask are skipped.

    An observation span (mask 0 inside a response) neither blocks nor discounts the return, and gets 0.
    """
    import torch

    out = torch.zeros_like(token_level_rewards)
    running = torch.zeros_like(token_level_rewards[:, 0])
    for t in reversed(range(token_level_rewards.shape[-1])):
        on = response_mask[:, t] != 0
        running = torch.where(on, token_level_rewards[:, t] + gamma * running, running)
        out[:, t] = torch.where(on, running, torch.zeros_like(running))
    return out


def summed_to_end(token_level_rewards: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Each token's sum of the masked rewards from it to the row's end (verl's optimal-token-baseline returns).

    Unlike :func:`reward_to_go`, a token outside the mask inside a response gets the sum too, as in verl;
    a NaN or inf outside the mask is padding and counts 0.
    """
    import torch

    masked = torch.where(response_mask != 0, token_level_rewards * response_mask, 0.0)
    return masked.flip(dims=[-1]).cumsum(dim=-1).flip(dims=[-1])


def broadcast(advantages: FloatArray | Ragged, like: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """One advantage per response copied over its masked tokens (or per-step advantages put on them).

    The result has ``like``'s dtype and device.
    """
    import torch

    if isinstance(advantages, Ragged):
        out = torch.zeros_like(like)
        out[response_mask.bool()] = torch.tensor(advantages.values, dtype=like.dtype, device=like.device)
        return out
    per_response = torch.tensor(np.asarray(advantages), dtype=like.dtype, device=like.device)
    return (per_response.unsqueeze(-1) * response_mask).to(like.dtype)


def _token_rows(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, per_token: bool = False) -> Ragged:
    """Each response's token values under its mask, as rllm's per-step (or, ``per_token``, per-token) rows."""
    lengths = _numpy((response_mask != 0).sum(dim=-1)).astype(np.intp)  # a fractional mask weights, it still counts
    offsets = np.zeros(len(lengths) + 1, dtype=np.intp)
    np.cumsum(lengths, out=offsets[1:])
    return Ragged(values=_numpy(token_level_rewards[response_mask.bool()]), offsets=offsets, per_token=per_token)


def _numpy(tensor: torch.Tensor) -> FloatArray:
    import torch

    return tensor.detach().to(device="cpu", dtype=torch.float64).numpy()


def _plain(value: Any) -> Any:
    """OmegaConf containers (verl's config) as plain dicts and lists; anything else unchanged."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
