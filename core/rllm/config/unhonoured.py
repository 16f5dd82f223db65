"""Keys that change nothing as set: one rule, judged against the schema's defaults.

:func:`unhonoured_keys` gives the keys of a list that a config sets away from their schema
default; a backend names with it the keys it cannot honour (warning or refusing), and
:func:`warn_switched_off` applies the one rule for keys that act only with their switch
(``kl_loss_coef`` without ``use_kl_loss``, ``tis_cap`` without ``tis_mode``, ...). The config is
checked by it wherever it is loaded, so every door says the same.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf

from rllm.config.schema import Schema
from rllm.errors import RLLMWarning

__all__ = ["SWITCHES", "Switch", "other_backend_keys", "switched_off", "unhonoured_keys", "warn_switched_off"]


def unhonoured_keys(config: DictConfig, keys: Iterable[str], schema: Schema | None = None) -> dict[str, Any]:
    """``{path: value}`` for those of ``keys`` set away from their schema default; a section names all its keys."""
    if schema is None:
        from rllm.config.loading import current_schema  # loading imports this module

        schema = current_schema()
    by_path = schema.by_path()
    out: dict[str, Any] = {}
    for wanted in keys:
        paths = [wanted] if wanted in by_path else sorted(p for p in by_path if p.startswith(wanted + "."))
        for path in paths:
            value = OmegaConf.select(config, path, default=by_path[path].default)
            value = OmegaConf.to_container(value, resolve=True) if isinstance(value, DictConfig) else value
            if value != by_path[path].default:
                out[path] = value
    return out


@dataclass(frozen=True)
class Switch:
    """Keys that act only while the switch ``key`` is ``on``; ``needs`` says what turns it on."""

    key: str
    on: Callable[[Any], bool]
    needs: str
    keys: tuple[str, ...]


_ALGORITHM = "rllm.algorithm."
SWITCHES: tuple[Switch, ...] = (
    Switch(
        f"{_ALGORITHM}use_kl_loss",
        lambda value: value is True,
        f"{_ALGORITHM}use_kl_loss=true",
        (f"{_ALGORITHM}kl_loss_coef", f"{_ALGORITHM}kl_beta", f"{_ALGORITHM}kl_loss_type"),
    ),
    Switch(
        f"{_ALGORITHM}use_kl_in_reward",
        lambda value: value is True,
        f"{_ALGORITHM}use_kl_in_reward=true",
        (f"{_ALGORITHM}kl_penalty", f"{_ALGORITHM}kl_ctrl"),
    ),
    Switch(
        f"{_ALGORITHM}rollout_correction.tis_mode",
        lambda value: value is not None,
        f"{_ALGORITHM}rollout_correction.tis_mode (token or sequence)",
        (f"{_ALGORITHM}rollout_correction.tis_cap", f"{_ALGORITHM}rollout_correction.tis_lower"),
    ),
    Switch(
        f"{_ALGORITHM}rollout_correction.rollout_rs",
        lambda value: value is not None,
        f"{_ALGORITHM}rollout_correction.rollout_rs (a rejection criterion)",
        (f"{_ALGORITHM}rollout_correction.rollout_rs_threshold",),
    ),
    Switch(
        "rllm.async_training.enable",
        lambda value: value is True,
        "rllm.async_training.enable=true",
        tuple(
            f"rllm.async_training.{key}" for key in ("staleness_threshold", "max_batches_ahead", "allow_uncorrected")
        ),
    ),
    Switch(
        "rllm.workflow.executor", lambda value: value == "ray", "rllm.workflow.executor=ray", ("rllm.workflow.ray",)
    ),
    Switch(
        "rllm.workflow.failure_policy",
        lambda value: value == "retry",
        "rllm.workflow.failure_policy=retry",
        ("rllm.workflow.retry_limit",),
    ),
    # under failure_policy=fail, raise_on_error=false is refused by the engine, not merely unused
    Switch(
        "rllm.workflow.failure_policy",
        lambda value: value != "drop_group",
        "a failure_policy other than drop_group",
        ("rllm.workflow.raise_on_error",),
    ),
)
"""Every key that acts only with its switch, by switch."""


def other_backend_keys(
    config: DictConfig, run: str, backends: Iterable[str], schema: Schema | None = None
) -> list[str]:
    """``"key=value configures the X backend ..."`` for each key set in the section of a backend (``rllm.<name>``,
    ``name`` among ``backends``) other than ``run``, the run's backend: the run would train without them."""
    sections = [f"rllm.{name}" for name in backends if name != run]
    return [
        f"{key}={value!r} configures the {key.split('.')[1]} backend, but this run trains with rllm.backend={run}; "
        f"set rllm.backend={key.split('.')[1]} or leave the key out."
        for key, value in unhonoured_keys(config, sections, schema).items()
    ]


def switched_off(config: DictConfig, schema: Schema | None = None) -> list[str]:
    """``"key=value has no effect without ..."`` for each key set while its switch is off."""
    said = []
    for switch in SWITCHES:
        if switch.on(OmegaConf.select(config, switch.key)):
            continue
        for key, value in unhonoured_keys(config, switch.keys, schema).items():
            said.append(f"{key}={value!r} has no effect without {switch.needs}.")
    return said


def warn_switched_off(config: DictConfig, schema: Schema | None = None) -> None:
    """Warn for each key that acts only with its switch and is set while the switch is off."""
    for message in switched_off(config, schema):
        warnings.warn(message, RLLMWarning, stacklevel=2)
