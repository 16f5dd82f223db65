"""Estimator inputs, numerics, dispatch, and the advantage entry points."""

from rllm.estimators.batch import OPTIONAL_FIELDS, AdvantageBatch
from rllm.estimators.collect import (
    Collected,
    RoleAdvantages,
    collect_advantages,
    collect_reward_and_advantage_from_trajectory_groups,
)
from rllm.estimators.compute import compute_advantages, get_estimator
from rllm.estimators.layout import GroupLayout
from rllm.estimators.numerics import PRESETS, Numerics, resolve_numerics
from rllm.estimators.ragged import Ragged

__all__ = [
    "OPTIONAL_FIELDS",
    "PRESETS",
    "AdvantageBatch",
    "Collected",
    "GroupLayout",
    "Numerics",
    "Ragged",
    "RoleAdvantages",
    "collect_advantages",
    "collect_reward_and_advantage_from_trajectory_groups",
    "compute_advantages",
    "get_estimator",
    "resolve_numerics",
]
