"""The settings a run reads once from its configuration, checked before the trainer builds anything.

The run's one :class:`AlgorithmConfig` is built here (the trainer's keyword ``estimator_map``
merged in), and the trainer hands that object to the backend, the rollout engine, the
collection step and the validation pass, so every part of a run sees the same settings.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig

from rllm.config.algorithm import AlgorithmConfig
from rllm.config.names import check_run_name
from rllm.errors import ConfigError, RLLMWarning
from rllm.estimators.compute import get_estimator
from rllm.trainer.dynamic_sampling import DynamicSamplingConfig
from rllm.trainer.grouping import CompactFilteringConfig
from rllm.trainer.rejection import RejectionSamplingConfig


@dataclass(frozen=True)
class RunSettings:
    """The parsed settings of a run: the algorithm, the filters and samplers, and the pass@k to validate with."""

    algorithm: AlgorithmConfig
    cf: CompactFilteringConfig
    rs: RejectionSamplingConfig
    ds: DynamicSamplingConfig
    val_pass_at_k: list[int]

    @classmethod
    def from_config(cls, config: DictConfig, estimator_map: Mapping[str, Any] | None = None) -> RunSettings:
        """Read and check them; ``estimator_map`` (role -> estimator or pair) extends the configured map."""
        rllm = config.rllm
        algorithm = AlgorithmConfig.from_config(config, estimator_map=estimator_map)
        for name in {algorithm.estimator, *algorithm.estimator_map.values()}:
            get_estimator(name)  # unknown names fail now, with suggestions, not after the first rollouts
        for key in ("project_name", "experiment_name"):
            check_run_name(f"rllm.trainer.{key}", rllm.trainer[key])
        rs = RejectionSamplingConfig.from_config(rllm.rejection_sample)
        pass_at_k = [int(k) for k in rllm.trainer.val_pass_at_k]
        too_many = [k for k in pass_at_k if k > int(rllm.rollout.n_val)]
        if too_many:
            raise ConfigError(
                f"rllm.trainer.val_pass_at_k={pass_at_k} asks for pass@{too_many[0]}, but validation draws "
                f"rllm.rollout.n_val={rllm.rollout.n_val} sample(s) per task; raise rllm.rollout.n_val or drop that k."
            )
        if int(rllm.rollout.n) < rs.min_trajs_per_group:
            warnings.warn(
                f"rllm.rollout.n={rllm.rollout.n} is below rllm.rejection_sample.min_trajs_per_group="
                f"{rs.min_trajs_per_group}: single-role tasks will have every group dropped.",
                RLLMWarning,
                stacklevel=4,
            )
        return cls(
            algorithm,
            CompactFilteringConfig.from_config(rllm.compact_filtering),
            rs,
            DynamicSamplingConfig.from_config(rllm),
            pass_at_k,
        )
