"""The declarations floor: the words every layer of rllm shares, each written once.

Batch fields (:mod:`~rllm.contract.fields`), the one declaration of a setting, config key or
option alike (:class:`~rllm.contract.keys.Setting`), the option tables estimators share
(:mod:`~rllm.contract.options`) and the domain's word lists (:mod:`~rllm.contract.names`:
kernel names, backend methods, aggregation modes, KL kinds, TIS modes, non-finite
policies, lr schedules). It imports nothing of rllm but :mod:`rllm.errors`, so config,
losses, estimators and the plugin system all read their vocabulary from here, and none of
them from another.
"""

from __future__ import annotations

from rllm.contract.fields import BATCH_ATTRIBUTES, BUILTIN_FIELDS, OPTIONAL_FIELDS, BatchField, BuiltinField
from rllm.contract.keys import ConfigKey, KeyType, Option, Setting
from rllm.contract.names import (
    BACKEND_ABSTRACT_METHODS,
    BACKEND_METHODS,
    ESTIMATOR_STYLES,
    KERNEL_NAMES,
    KL_CONTROLLERS,
    KL_KIND_CHOICES,
    KL_KINDS,
    LOSS_AGG_MODES,
    LR_SCHEDULES,
    NONFINITE_POLICIES,
    REFUSED_HOOKIMPL_OPTIONS,
    TIS_MODES,
    EstimatorStyle,
    KlController,
    LrSchedule,
    NonFinitePolicy,
    TisMode,
)
from rllm.contract.options import (
    CONFIG_NAMES,
    CONFIG_OPTIONS,
    CONTEXT_NAMES,
    NUMERICS_CHOICES,
    NUMERICS_NAMES,
    NUMERICS_OPTIONS,
    PRESET_NAMES,
)

__all__ = [
    "BACKEND_ABSTRACT_METHODS",
    "BACKEND_METHODS",
    "BATCH_ATTRIBUTES",
    "BUILTIN_FIELDS",
    "CONFIG_NAMES",
    "CONFIG_OPTIONS",
    "CONTEXT_NAMES",
    "ESTIMATOR_STYLES",
    "KERNEL_NAMES",
    "KL_CONTROLLERS",
    "KL_KINDS",
    "KL_KIND_CHOICES",
    "LOSS_AGG_MODES",
    "LR_SCHEDULES",
    "NONFINITE_POLICIES",
    "NUMERICS_CHOICES",
    "NUMERICS_NAMES",
    "NUMERICS_OPTIONS",
    "OPTIONAL_FIELDS",
    "PRESET_NAMES",
    "REFUSED_HOOKIMPL_OPTIONS",
    "TIS_MODES",
    "BatchField",
    "BuiltinField",
    "ConfigKey",
    "EstimatorStyle",
    "KeyType",
    "KlController",
    "LrSchedule",
    "NonFinitePolicy",
    "Option",
    "Setting",
    "TisMode",
]
