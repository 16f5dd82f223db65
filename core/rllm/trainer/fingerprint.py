"""The settings a checkpoint is tied to, so that resuming under other settings is refused, naming the key."""

from __future__ import annotations

import dataclasses
from typing import Any

from omegaconf import DictConfig, OmegaConf

from rllm.config.algorithm import AlgorithmConfig, estimator_name
from rllm.trainer.dynamic_sampling import DynamicSamplingConfig

NUMBER_SETTINGS = (
    "rllm.grouping_hook",
    "rllm.algorithm",
    "rllm.stepwise_advantage",
    "rllm.compact_filtering",
    "rllm.rejection_sample",
    "rllm.rollout.n",
    "rllm.data.train_batch_size",
    "rllm.data.shuffle",
)
"""Config keys (and sections) that change a run's numbers: a checkpoint resumes only under the same values."""


LAYOUT_SECTION = "distributed"
"""A backend section's subsection of how the update is laid out over ranks (DDP or FSDP, timeouts), which does not
change the run's numbers: a checkpoint written under one layout resumes under another."""
CONNECTION_KEYS = ("base_url", "api_key")
"""A backend section's keys of where its service is and the credential it sends (``rllm.tinker``): they do not
change the run's numbers, and a credential must never reach a checkpoint's ``trainer.json``."""


def _flatten(path: str, node: Any, into: dict[str, Any]) -> None:
    """A section as its keys (each value whole: options compare as one mapping), or a single key."""
    if isinstance(node, dict):
        into.update({f"{path}.{key}": value for key, value in node.items()})
    else:
        into[path] = node


def run_fingerprint(
    config: DictConfig, algorithm_config: AlgorithmConfig, ds_config: DynamicSamplingConfig
) -> dict[str, Any]:
    """Settings a checkpoint is tied to: resuming under others would mix two experiments.

    Beyond the named choices, every key of :data:`NUMBER_SETTINGS` and of the backend's own
    section (``rllm.<backend>``: its task family, seed, learning rate, ...; not its
    :data:`LAYOUT_SECTION` nor its :data:`CONNECTION_KEYS`) is in it, by its dotted name, so a mismatch names the key.
    """
    resolved = OmegaConf.to_container(config, resolve=True)
    settings: dict[str, Any] = {}
    for path in (*NUMBER_SETTINGS, f"rllm.{config.rllm.backend}"):
        node: Any = resolved
        for part in path.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict) and path == f"rllm.{config.rllm.backend}":
            node = {key: value for key, value in node.items() if key not in (LAYOUT_SECTION, *CONNECTION_KEYS)}
        if node is not None:
            _flatten(path, node, settings)
    return {
        **settings,
        "backend": str(config.rllm.backend),
        "estimator": estimator_name(algorithm_config.estimator),
        "estimator_map": {k: estimator_name(v) for k, v in algorithm_config.estimator_map.items()},
        "loss_fn": algorithm_config.loss_fn,
        **({"normalize_by_steps": True} if algorithm_config.normalize_by_steps else {}),
        **({"dynamic_sampling": dataclasses.asdict(ds_config)} if ds_config.enabled else {}),
        **({"async_training": resolved["rllm"]["async_training"]} if config.rllm.async_training.enable else {}),
    }
