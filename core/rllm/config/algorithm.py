"""What the advantage step needs to know from a run's configuration."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from rllm.config.schema import CORE_KEYS
from rllm.errors import ConfigError
from rllm.estimators.names import EstimatorName, estimator_name, rLLMAdvantageEstimator

if TYPE_CHECKING:  # omegaconf loads only when a run configuration is read
    from omegaconf import DictConfig


def _as_estimator(name: EstimatorName) -> EstimatorName:
    """Known names become enum members; custom names stay strings so they still resolve."""
    name = estimator_name(name)
    member = rLLMAdvantageEstimator(name)
    return member if member.value == name else name


NonFinitePolicy = Literal["error", "zero", "exclude"]

_FIELD_KEYS = {
    key.path.rsplit(".", 1)[-1]: key
    for key in CORE_KEYS
    if key.path.startswith("rllm.algorithm.") and key.type not in ("mapping",) and key.names is None
}
"""Schema keys of the fields that are checked the same way as in a config file."""


@dataclass
class AlgorithmConfig:
    """Configuration of the advantage step.

    Beyond the documented fields: ``epsilon`` (the std guard; ``None`` keeps the estimator's
    default), ``gamma`` and ``lam`` (discount and GAE lambda of the per-step estimators),
    ``estimator_options`` (extra keyword options for the estimators, e.g.
    ``preset``; a key naming an estimator holds options for it alone) and
    ``nonfinite_rewards`` (``"error"`` rejects NaN/inf rewards naming the group; ``"zero"``
    gives such groups zero advantage, leaves them out of the metrics and warns; ``"exclude"``
    leaves only the unscorable rollouts out of every statistic and gives them advantage 0).
    """

    use_rllm: bool = False
    estimator: EstimatorName = rLLMAdvantageEstimator.GRPO
    estimator_map: dict[str, EstimatorName] = field(default_factory=dict)
    stepwise_advantage_mode: Literal["broadcast", "per_step"] = "broadcast"
    norm_adv_by_std_in_grpo: bool = True
    use_precomputed_advantage: bool = False
    loss_fn: Literal["importance_sampling", "ppo", "cispo", "dro", "cross_entropy"] | None = None
    lr_schedule: Literal["linear", "cosine", "constant"] = "constant"
    warmup_steps_ratio: float = 0.0
    epsilon: float | None = None
    gamma: float = 1.0
    lam: float = 0.95
    estimator_options: dict[str, Any] = field(default_factory=dict)
    nonfinite_rewards: NonFinitePolicy = "error"
    normalize_by_steps: bool = False
    """Divide every step's advantage by its trajectory's number of steps (rLLM's stepwise option)."""

    def __post_init__(self) -> None:
        for name, key in _FIELD_KEYS.items():
            key.check(getattr(self, name))
        self.estimator = _as_estimator(self.estimator)
        self.estimator_map = {str(role): _as_estimator(name) for role, name in self.estimator_map.items()}
        if self.stepwise_advantage_mode == "per_step":
            warnings.warn(
                "stepwise_advantage_mode='per_step' is not supported by the unified pipeline and was "
                "switched to 'broadcast'; compute per-step advantages in a grouping hook or an estimator.",
                DeprecationWarning,
                stacklevel=3,
            )
            self.stepwise_advantage_mode = "broadcast"
        if self.stepwise_advantage_mode != "broadcast":
            raise ConfigError(f"stepwise_advantage_mode={self.stepwise_advantage_mode!r} is unknown; use 'broadcast'.")

    def estimator_for(self, role: str) -> EstimatorName:
        return self.estimator_map.get(role, self.estimator)

    def options_for(self, name: str) -> dict[str, Any]:
        """The ``estimator_options`` that apply to estimator ``name``."""
        shared = {k: v for k, v in self.estimator_options.items() if not isinstance(v, Mapping)}
        own = self.estimator_options.get(name)
        return {**shared, **own} if isinstance(own, Mapping) else shared

    def ambient_options(self) -> dict[str, Any]:
        """Config keywords offered to every estimator; each receives only those it accepts."""
        ambient: dict[str, Any] = {
            "norm_adv_by_std_in_grpo": self.norm_adv_by_std_in_grpo,
            "gamma": self.gamma,
            "lam": self.lam,
        }
        if self.epsilon is not None:
            ambient["epsilon"] = self.epsilon
        return ambient

    @classmethod
    def from_config(cls, config: DictConfig) -> AlgorithmConfig:
        """Read the fields from a run configuration (rLLM's keys).

        The estimator comes from the top-level ``algorithm.adv_estimator`` (verl's key) when
        present, else from ``rllm.algorithm.adv_estimator``.
        """
        rllm = config.rllm
        algo = rllm.get("algorithm", None) or {}
        stepwise = rllm.get("stepwise_advantage", None) or {}
        top = config.get("algorithm", None) or {}
        name = top.get("adv_estimator", None) or algo.get("adv_estimator", "grpo")
        estimator_map = algo.get("estimator_map", None) or {}
        options = algo.get("estimator_options", None) or {}
        fields = {key: algo[key] for key in _FIELD_KEYS if key in algo}
        return cls(
            estimator=str(name),
            estimator_map={str(k): str(v) for k, v in _plain(estimator_map).items()},
            stepwise_advantage_mode=stepwise.get("mode", "broadcast"),
            normalize_by_steps=bool(stepwise.get("normalize_by_steps", False)),
            estimator_options=dict(_plain(options)),
            **fields,
        )


def _plain(node: Any) -> dict[str, Any]:
    from omegaconf import DictConfig, OmegaConf

    if isinstance(node, DictConfig):
        return OmegaConf.to_container(node, resolve=True)  # type: ignore[return-value]
    return dict(node)
