"""What the advantage step needs to know from a run's configuration."""

from __future__ import annotations

import difflib
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from rllm.config.names import EstimatorName, estimator_name, rLLMAdvantageEstimator
from rllm.config.schema import CORE_KEYS
from rllm.contract.names import TIS_MODES, KlController, LrSchedule, NonFinitePolicy, TisMode
from rllm.errors import ConfigError, RLLMDeprecationWarning


def _as_estimator(name: EstimatorName) -> EstimatorName:
    """Known names become enum members; custom names stay strings so they still resolve."""
    name = estimator_name(name)
    member = rLLMAdvantageEstimator(name)
    return member if member.value == name else name


_USE_RLLM_DEPRECATED = (
    "algorithm.use_rllm is deprecated and ignored: advantages are always computed by rllm's estimators. "
    "Remove the key from your config."
)


def _one_of(key: str, value: Any, choices: Sequence[Any]) -> None:
    if value not in choices:
        shown = ", ".join("null" if c is None else repr(c) for c in choices)
        raise ConfigError(f"{key} must be one of {shown}; got {value!r}.")


_CORRECTION_KEYS = {
    key.path.rsplit(".", 1)[-1]: key for key in CORE_KEYS if key.path.startswith("rllm.algorithm.rollout_correction.")
}
"""The ``rollout_correction`` section's schema keys, by field name."""
_TIS_CAP = _CORRECTION_KEYS["tis_cap"]


@dataclass
class RolloutCorrectionConfig:
    """Rollout correction for backends that sample with one engine and train with another.

    ``tis_mode`` (None, ``"token"`` or ``"sequence"``) turns on truncated importance sampling
    at that level with weights clamped at ``tis_cap`` (with ``tis_lower``: zeroed outside
    ``[tis_lower, tis_cap]``, IcePop); ``rollout_rs`` with ``rollout_rs_threshold`` rejects
    tokens or sequences by divergence (verl's criteria); ``off_policy_mask_threshold`` is TRL's
    off-policy sequence mask; ``bypass_mode`` True uses the rollout logprobs as the old policy
    (None: the backend's default). See :mod:`rllm.losses.correction`.
    """

    tis_mode: TisMode | None = None
    bypass_mode: bool | None = None
    tis_cap: float = _TIS_CAP.default
    tis_lower: float | None = None
    rollout_rs: str | None = None
    rollout_rs_threshold: str | None = None
    off_policy_mask_threshold: float | None = None

    def __post_init__(self) -> None:
        from rllm.losses.correction import check_correction, parse_rejection

        _one_of("rllm.algorithm.rollout_correction.tis_mode", self.tis_mode, (None, *TIS_MODES))
        for name in ("tis_cap", "tis_lower", "rollout_rs", "rollout_rs_threshold", "off_policy_mask_threshold"):
            setattr(self, name, _CORRECTION_KEYS[name].check(getattr(self, name)))
        check_correction(self.tis_mode, self.tis_cap, self.tis_lower, self.off_policy_mask_threshold)
        parse_rejection(self.rollout_rs, self.rollout_rs_threshold)

    @classmethod
    def from_mapping(cls, section: Mapping[str, Any]) -> RolloutCorrectionConfig:
        """The section's keys as a config file gives them; an unknown key is refused naming the known ones."""
        extra = sorted(set(section) - set(_CORRECTION_KEYS))
        if extra:
            raise ConfigError(
                f"Unknown key 'rllm.algorithm.rollout_correction.{extra[0]}'; its keys are "
                f"{', '.join(sorted(_CORRECTION_KEYS))}."
            )
        return cls(**{name: section[name] for name in _CORRECTION_KEYS if name in section})


_KL_CTRL_KEYS = {
    key.path.rsplit(".", 1)[-1]: key for key in CORE_KEYS if key.path.startswith("rllm.algorithm.kl_ctrl.")
}
"""The ``kl_ctrl`` section's schema keys, by field name."""


@dataclass
class KLControlConfig:
    """verl's ``kl_ctrl`` section: the controller of the KL-in-reward coefficient (``use_kl_in_reward``).

    ``type`` is ``fixed`` (``kl_coef`` throughout) or ``adaptive`` (``kl_coef`` to start, moved
    each step so the measured KL approaches ``target_kl``, by at most 20% per ``horizon``
    samples and per update). Each field is checked by its schema key, so a bad value reads as in a config file.
    """

    type: KlController = "fixed"
    kl_coef: float = _KL_CTRL_KEYS["kl_coef"].default
    target_kl: float = _KL_CTRL_KEYS["target_kl"].default
    horizon: int = _KL_CTRL_KEYS["horizon"].default

    def __post_init__(self) -> None:
        for name, key in _KL_CTRL_KEYS.items():
            key.check(getattr(self, name))

    @classmethod
    def from_mapping(cls, section: Mapping[str, Any]) -> KLControlConfig:
        """The section as a config file gives it; an unknown key is a named error with the close match."""
        extra = sorted(set(section) - set(_KL_CTRL_KEYS))
        if extra:
            close = difflib.get_close_matches(extra[0], sorted(_KL_CTRL_KEYS), n=1, cutoff=0.6)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise ConfigError(
                f"Unknown key 'rllm.algorithm.kl_ctrl.{extra[0]}'; its keys are "
                f"{', '.join(sorted(_KL_CTRL_KEYS))}.{hint}"
            )
        return cls(**{name: section[name] for name in _KL_CTRL_KEYS if name in section})


_FIELD_KEYS = {
    key.path.rsplit(".", 1)[-1]: key
    for key in CORE_KEYS
    if key.path.startswith("rllm.algorithm.")
    and key.path.count(".") == 2  # the section's own keys; rollout_correction.*, kl_ctrl.* are checked by theirs
    and key.type not in ("mapping",)
    and key.names is None
}
"""Schema keys of the fields that are checked the same way as in a config file."""
_DEFAULTS = {name: key.default for name, key in _FIELD_KEYS.items()}
"""Each such field's default, read from its schema key (``from_config`` fills a missing key with it)."""


@dataclass
class AlgorithmConfig:
    """Configuration of the advantage step, and the loss settings backends read.

    ``estimator_map`` values are estimator names, or ``(estimator, loss_fn)`` pairs that also
    choose the policy loss of that role; pairs are split into ``estimator_map`` and
    ``loss_fn_map``. ``use_rllm`` is deprecated (a warning when set); ``per_step`` mode becomes
    ``broadcast`` with an RLLMDeprecationWarning.

    Beyond rLLM's fields: ``epsilon`` (the std guard; ``None`` keeps the estimator's
    default), ``gamma`` and ``lam`` (discount and GAE lambda of the per-step estimators),
    ``estimator_options`` (extra keyword options for the estimators, e.g.
    ``preset``; a key naming an estimator holds options for it alone) and
    ``nonfinite_rewards`` (``"error"`` rejects NaN/inf rewards naming the group; ``"zero"``
    gives such groups zero advantage, leaves them out of the metrics and warns; ``"exclude"``
    leaves only the unscorable rollouts out of every statistic and gives them advantage 0).
    verl's KL in the reward: ``use_kl_in_reward``, its estimator ``kl_penalty`` and the
    coefficient's controller ``kl_ctrl`` (a :class:`KLControlConfig` or a mapping of its keys).
    """

    use_rllm: bool | None = _DEFAULTS["use_rllm"]
    estimator: EstimatorName = rLLMAdvantageEstimator.GRPO
    estimator_map: dict[str, Any] = field(default_factory=dict)
    loss_fn_map: dict[str, str] = field(default_factory=dict)
    stepwise_advantage_mode: Literal["broadcast", "per_step"] = "broadcast"
    norm_adv_by_std_in_grpo: bool = _DEFAULTS["norm_adv_by_std_in_grpo"]
    use_precomputed_advantage: bool = _DEFAULTS["use_precomputed_advantage"]
    loss_fn: str | None = _DEFAULTS["loss_fn"]
    lr_schedule: LrSchedule = _DEFAULTS["lr_schedule"]
    warmup_steps: int = _DEFAULTS["warmup_steps"]
    warmup_steps_ratio: float = _DEFAULTS["warmup_steps_ratio"]
    kl_beta: float = _DEFAULTS["kl_beta"]
    """rLLM's name of ``kl_loss_coef``: other than its default (rLLM's 0), it is the coefficient."""
    eps_clip: float = _DEFAULTS["eps_clip"]
    entropy_coeff: float = _DEFAULTS["entropy_coeff"]
    """verl's entropy bonus: the aggregated entropy times it is subtracted from the policy loss."""
    eps_clip_high: float | None = _DEFAULTS["eps_clip_high"]
    loss_agg_mode: str | None = _DEFAULTS["loss_agg_mode"]
    loss_options: dict[str, Any] = field(default_factory=dict)
    use_kl_loss: bool = _DEFAULTS["use_kl_loss"]
    kl_loss_coef: float = _DEFAULTS["kl_loss_coef"]
    """verl's coefficient of the KL loss term, acting with ``use_kl_loss``."""
    kl_loss_type: str = _DEFAULTS["kl_loss_type"]
    use_kl_in_reward: bool = _DEFAULTS["use_kl_in_reward"]
    kl_penalty: str = _DEFAULTS["kl_penalty"]
    kl_ctrl: KLControlConfig = field(default_factory=KLControlConfig)
    rollout_correction: RolloutCorrectionConfig = field(default_factory=RolloutCorrectionConfig)
    router_replay: Literal["disabled", "R2", "R3"] = _DEFAULTS["router_replay"]
    epsilon: float | None = _DEFAULTS["epsilon"]
    gamma: float = _DEFAULTS["gamma"]
    lam: float = _DEFAULTS["lam"]
    estimator_options: dict[str, Any] = field(default_factory=dict)
    nonfinite_rewards: NonFinitePolicy = _DEFAULTS["nonfinite_rewards"]
    normalize_by_steps: bool = False
    """Divide every step's advantage by its trajectory's number of steps (rLLM's stepwise option)."""

    def __post_init__(self) -> None:
        for name, key in _FIELD_KEYS.items():
            key.check(getattr(self, name))
        if self.kl_beta != _DEFAULTS["kl_beta"]:  # rLLM's name of verl's kl_loss_coef
            if self.kl_loss_coef not in (_DEFAULTS["kl_loss_coef"], self.kl_beta):
                raise ConfigError(
                    f"rllm.algorithm.kl_beta={self.kl_beta!r} and kl_loss_coef={self.kl_loss_coef!r} are one setting "
                    "(kl_beta is rLLM's name of verl's kl_loss_coef); set one of them."
                )
            self.kl_loss_coef = float(self.kl_beta)
        if self.use_rllm is not None:
            warnings.warn(_USE_RLLM_DEPRECATED, RLLMDeprecationWarning, stacklevel=3)
        self.estimator = _as_estimator(self.estimator)
        self.loss_fn_map = {str(role): str(loss) for role, loss in self.loss_fn_map.items()}
        estimators: dict[str, EstimatorName] = {}
        for role, value in self.estimator_map.items():
            if isinstance(value, tuple | list):
                if len(value) != 2:
                    raise ConfigError(
                        f"estimator_map[{role!r}] must be an estimator name or an (estimator, loss_fn) pair (exactly 2 "
                        f"elements); got {len(value)} elements."
                    )
                value, self.loss_fn_map[str(role)] = value[0], str(value[1])
            estimators[str(role)] = _as_estimator(value)
        self.estimator_map = estimators
        if isinstance(self.rollout_correction, Mapping):
            self.rollout_correction = RolloutCorrectionConfig(**self.rollout_correction)
        if isinstance(self.kl_ctrl, Mapping):
            self.kl_ctrl = KLControlConfig.from_mapping(self.kl_ctrl)
        if not isinstance(self.kl_ctrl, KLControlConfig):
            raise ConfigError(f"kl_ctrl must be a KLControlConfig or a mapping of its keys; got {self.kl_ctrl!r}.")
        if self.stepwise_advantage_mode == "per_step":
            warnings.warn(
                "stepwise_advantage_mode='per_step' is not supported by the unified pipeline and was "
                "switched to 'broadcast'; compute per-step advantages in a grouping hook or an estimator.",
                RLLMDeprecationWarning,
                stacklevel=3,
            )
            self.stepwise_advantage_mode = "broadcast"
        if self.stepwise_advantage_mode != "broadcast":
            raise ConfigError(f"stepwise_advantage_mode={self.stepwise_advantage_mode!r} is unknown; use 'broadcast'.")

    def estimator_for(self, role: str) -> EstimatorName:
        return self.estimator_map.get(role, self.estimator)

    def loss_fn_for(self, role: str) -> str | None:
        """The policy loss of ``role``: its ``loss_fn_map`` entry, else ``loss_fn`` (None: the backend's default)."""
        return self.loss_fn_map.get(role, self.loss_fn)

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
    def from_config(
        cls,
        config: Mapping[str, Any],
        *,
        stepwise_advantage_mode: str | None = None,
        estimator_map: Mapping[str, Any] | None = None,
    ) -> AlgorithmConfig:
        """Read the fields from a run configuration, or from its ``rllm.algorithm`` section alone.

        Given the whole run configuration (it has an ``rllm`` key), the estimator comes from the
        top-level ``algorithm.adv_estimator`` (verl's key) when present, else from
        ``rllm.algorithm.adv_estimator``; the mode from ``rllm.stepwise_advantage.mode``. Given
        the section (rLLM's current form), ``stepwise_advantage_mode`` defaults to
        ``broadcast``. ``estimator_map`` (pairs allowed) is merged over the configured map.
        """
        if "rllm" in config:
            rllm = config["rllm"]
            algo = rllm.get("algorithm", None) or {}
            stepwise = rllm.get("stepwise_advantage", None) or {}
            top = config.get("algorithm", None) or {}
            name = top.get("adv_estimator", None) or algo.get("adv_estimator", "grpo")
            mode = stepwise_advantage_mode or stepwise.get("mode", "broadcast")
            normalize_by_steps = bool(stepwise.get("normalize_by_steps", False))
            norm = stepwise.get("norm_adv_by_std_in_grpo", None)
            if norm is None:
                norm = algo.get("norm_adv_by_std_in_grpo", _DEFAULTS["norm_adv_by_std_in_grpo"])
            use_rllm = stepwise.get("use_rllm", algo.get("use_rllm", _DEFAULTS["use_rllm"]))
        else:
            algo = config
            unknown = sorted(set(algo) - _SECTION_KEYS)
            if unknown:
                close = difflib.get_close_matches(unknown[0], sorted(_SECTION_KEYS), n=1, cutoff=0.6)
                hint = f" Did you mean {close[0]!r}?" if close else ""
                raise ConfigError(f"Unknown key {unknown[0]!r} in the rllm.algorithm section.{hint}")
            name = algo.get("adv_estimator", "grpo")
            mode = stepwise_advantage_mode or "broadcast"
            normalize_by_steps = False
            norm = algo.get("norm_adv_by_std_in_grpo", _DEFAULTS["norm_adv_by_std_in_grpo"])
            use_rllm = algo.get("use_rllm", _DEFAULTS["use_rllm"])
        if use_rllm is False:  # the seed's default value, as config files carry it: not a use of the key
            use_rllm = None
        correction = _plain(algo.get("rollout_correction", None) or {})
        return cls(
            estimator=str(name),
            estimator_map={**_plain(algo.get("estimator_map", None) or {}), **(estimator_map or {})},
            loss_fn_map={str(k): str(v) for k, v in _plain(algo.get("loss_fn_map", None) or {}).items()},
            stepwise_advantage_mode=cast(Literal["broadcast", "per_step"], mode),
            normalize_by_steps=normalize_by_steps,
            norm_adv_by_std_in_grpo=bool(norm),
            use_rllm=use_rllm,
            use_precomputed_advantage=algo.get("use_precomputed_advantage", _DEFAULTS["use_precomputed_advantage"]),
            loss_fn=algo.get("loss_fn", _DEFAULTS["loss_fn"]),
            lr_schedule=algo.get("lr_schedule", _DEFAULTS["lr_schedule"]),
            warmup_steps=int(algo.get("warmup_steps", _DEFAULTS["warmup_steps"])),
            warmup_steps_ratio=float(algo.get("warmup_steps_ratio", _DEFAULTS["warmup_steps_ratio"])),
            kl_beta=float(algo.get("kl_beta", _DEFAULTS["kl_beta"])),
            kl_loss_coef=float(algo.get("kl_loss_coef", _DEFAULTS["kl_loss_coef"])),
            eps_clip=float(algo.get("eps_clip", _DEFAULTS["eps_clip"])),
            eps_clip_high=algo.get("eps_clip_high", _DEFAULTS["eps_clip_high"]),
            loss_agg_mode=algo.get("loss_agg_mode", _DEFAULTS["loss_agg_mode"]),
            loss_options=dict(_plain(algo.get("loss_options", None) or {})),
            use_kl_loss=bool(algo.get("use_kl_loss", _DEFAULTS["use_kl_loss"])),
            kl_loss_type=str(algo.get("kl_loss_type", _DEFAULTS["kl_loss_type"])),
            use_kl_in_reward=algo.get("use_kl_in_reward", _DEFAULTS["use_kl_in_reward"]),
            kl_penalty=algo.get("kl_penalty", _DEFAULTS["kl_penalty"]),
            kl_ctrl=KLControlConfig.from_mapping(_plain(algo.get("kl_ctrl", None) or {})),
            rollout_correction=RolloutCorrectionConfig.from_mapping(correction),
            entropy_coeff=float(algo.get("entropy_coeff", _DEFAULTS["entropy_coeff"])),
            router_replay=algo.get("router_replay", _DEFAULTS["router_replay"]),
            epsilon=algo.get("epsilon", _DEFAULTS["epsilon"]),
            gamma=float(algo.get("gamma", _DEFAULTS["gamma"])),
            lam=float(algo.get("lam", _DEFAULTS["lam"])),
            estimator_options=dict(_plain(algo.get("estimator_options", None) or {})),
            nonfinite_rewards=algo.get("nonfinite_rewards", _DEFAULTS["nonfinite_rewards"]),
        )


_SECTION_KEYS = frozenset(key.path.split(".")[2] for key in CORE_KEYS if key.path.startswith("rllm.algorithm."))
"""Keys of the ``rllm.algorithm`` section: rLLM's, and this project's additions."""


def _plain(node: Any) -> dict[str, Any]:
    from omegaconf import DictConfig, OmegaConf

    if isinstance(node, DictConfig):
        return OmegaConf.to_container(node, resolve=True)  # type: ignore[return-value]
    return dict(node)
