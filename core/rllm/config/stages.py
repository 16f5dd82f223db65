"""Configuration of the trainer stages around the advantage step, in rLLM's current shape.

:class:`CompactFilteringConfig` (which termination reasons take an episode out of training),
:class:`RejectionSamplingConfig` (which groups reach the update) and :class:`TransformConfig`
(how episodes become trajectory groups) read the ``rllm.compact_filtering``,
``rllm.rejection_sample`` and ``rllm.stepwise_advantage`` sections with rLLM's defaults.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from rllm.contract.names import REJECTION_SAMPLING_MODES, RejectionSamplingMode
from rllm.errors import ConfigError
from rllm.types import DEFAULT_TRAJ_NAME, TerminationReason


@dataclass
class CompactFilteringConfig:
    """Mask episodes by termination reason; every flag is off unless set, and nothing is masked unless ``enable``."""

    enable: bool = False
    mask_max_prompt_length_exceeded: bool = False
    mask_max_response_length_exceeded: bool = False
    mask_env_done: bool = False
    mask_max_turns_exceeded: bool = False
    mask_timeout: bool = False
    mask_unknown: bool = False
    mask_error: bool = False

    @classmethod
    def from_config(cls, section: Mapping[str, Any] | None) -> CompactFilteringConfig:
        """From the ``rllm.compact_filtering`` section; an unknown key is an error naming it."""
        section = dict(section or {})
        known = {f.name for f in fields(cls)}
        for key in section:
            if key not in known:
                raise ConfigError(
                    f"Unknown key 'rllm.compact_filtering.{key}'; known keys: {', '.join(sorted(known))}."
                )
        return cls(**{key: bool(value) for key, value in section.items()})

    def should_mask(self, termination_reason: TerminationReason | str | None) -> bool:
        """Whether an episode that ended for ``termination_reason`` is left out of training."""
        if not self.enable or termination_reason is None:
            return False
        try:
            reason = TerminationReason(termination_reason)
        except ValueError:
            return False
        return bool(getattr(self, f"mask_{reason.value}", False))


@dataclass
class RejectionSamplingConfig:
    """Which trajectory groups reach the update.

    ``none`` keeps every group with at least ``min_trajs_per_group`` trajectories; ``episode``
    also accumulates batches until ``min_partial_solve_tasks`` tasks were solved by some but
    not all rollouts; ``group`` filters by group size only; ``batch`` (rllm's) keeps only each
    batch's partly solved groups. ``filter_uniform_groups`` drops
    groups whose rewards are all equal (no learning signal) and generates more until the
    batch is full: the trainer runs it as dynamic sampling with tolerance 0 and the ``drop``
    strategy (docs/trainer.md, "Dynamic sampling").
    """

    mode: RejectionSamplingMode = "none"
    min_trajs_per_group: int = 2
    min_partial_solve_tasks: int = 1
    filter_uniform_groups: bool = False

    def __post_init__(self) -> None:
        if self.mode not in REJECTION_SAMPLING_MODES:
            raise ConfigError(
                f"rllm.rejection_sample.mode={self.mode!r} is unknown; "
                f"use one of {', '.join(REJECTION_SAMPLING_MODES)}."
            )
        if self.min_trajs_per_group < 1:
            raise ConfigError(
                f"rllm.rejection_sample.min_trajs_per_group must be at least 1, got {self.min_trajs_per_group}."
            )
        if self.min_partial_solve_tasks < 0:
            raise ConfigError(
                f"rllm.rejection_sample.min_partial_solve_tasks must be at least 0, got {self.min_partial_solve_tasks}."
            )

    @classmethod
    def from_config(cls, section: Mapping[str, Any] | None) -> RejectionSamplingConfig:
        """From ``rllm.rejection_sample``: off unless ``enable``; enabled without ``mode`` means ``episode``."""
        section = section or {}
        enabled = bool(section.get("enable", False))
        multiplier = int(section.get("multiplier", 1))
        if multiplier < 1:
            raise ConfigError(f"rllm.rejection_sample.multiplier must be at least 1, got {multiplier}.")
        if not enabled and multiplier != 1:
            raise ConfigError(
                "rllm.rejection_sample.multiplier is not 1 but rejection sampling is disabled; set "
                "rllm.rejection_sample.enable=true or multiplier=1."
            )
        mode = (section.get("mode", None) or "episode") if enabled else "none"
        return cls(
            mode=str(mode),  # type: ignore[arg-type]
            min_trajs_per_group=int(section.get("min_trajs_per_group", 2)),
            min_partial_solve_tasks=int(section.get("min_partial_solve_tasks", 1)),
            filter_uniform_groups=bool(section.get("filter_uniform_groups", False)),
        )


@dataclass
class TransformConfig:
    """How episodes become trajectory groups.

    Unnamed trajectories (named ``default_traj_name``) get a name when ``impute_missing_names``
    or are dropped when ``drop_unnamed_traj``; ``broadcast`` uses trajectory-level rewards
    (``rllm.stepwise_advantage.mode == "broadcast"``). The naming fields are options of the
    built-in grouping hook (``rllm.grouping_hook_options``; :meth:`grouping_options`).
    """

    impute_missing_names: bool = True
    default_traj_name: str = DEFAULT_TRAJ_NAME
    drop_unnamed_traj: bool = False
    broadcast: bool = True

    @classmethod
    def from_config(cls, section: Mapping[str, Any] | None, *, broadcast: bool = True) -> TransformConfig:
        section = section or {}
        return cls(
            impute_missing_names=bool(section.get("impute_missing_names", True)),
            default_traj_name=str(section.get("default_traj_name", DEFAULT_TRAJ_NAME)),
            drop_unnamed_traj=bool(section.get("drop_unnamed_traj", False)),
            broadcast=broadcast,
        )

    def grouping_options(self) -> dict[str, Any]:
        """The naming fields as the options of the built-in ``task_and_role`` grouping hook."""
        return {
            "impute_missing_names": self.impute_missing_names,
            "default_traj_name": self.default_traj_name,
            "drop_unnamed_traj": self.drop_unnamed_traj,
        }
