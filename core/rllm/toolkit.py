"""The public toolkit for estimator authors: what the built-in estimators are made of.

A plugin's estimator receives an :class:`AdvantageBatch` (flat rewards, optional per-trajectory
fields, and the :class:`GroupLayout` of its groups) and, when it registers with
``numerics=True``, one resolved :class:`Numerics` (std divisor, eps, policy for groups of one,
dtype, whitening; presets reproduce other frameworks). The statistics below do segment
reductions over all groups at once, and pick up compiled kernels from any installed kernel
plugin (``rllm[fast]``), which travel with the batch's layout (``batch.layout.kernels``). A
caller that builds batches itself (a bridge from another framework) asks the plugins once
with :func:`resolve_plugins` and hands the result on. Everything here is stable API; the
modules behind it are not.
"""

from rllm.contract.fields import TOKEN_FIELDS, BatchField
from rllm.contract.keys import Option
from rllm.contract.options import CONFIG_OPTIONS, NUMERICS_OPTIONS
from rllm.estimators.acceleration import CENTRE, DIVIDE_BY_STD, PRIMITIVES, RLOO_FACTOR, Kernels, kernel, numpy_only
from rllm.estimators.batch import AdvantageBatch
from rllm.estimators.compute import get_estimator, run_estimator
from rllm.estimators.distillation import reverse_kl_advantages
from rllm.estimators.layout import GroupLayout
from rllm.estimators.numerics import PRESETS, Numerics, resolve_numerics
from rllm.estimators.ragged import FloatArray, IndexArray, Ragged
from rllm.estimators.resolution import Resolved, resolve_plugins
from rllm.estimators.state import EstimatorState, EstimatorStates, state_factory, stateful
from rllm.estimators.statistics import (
    accelerated_centre,
    batch_std,
    centre,
    constant_groups,
    group_means,
    group_std,
    inverse_scale,
    lone_groups,
    normalise_groups,
    rewards_as,
    suffix_discounted,
    whiten,
    whitening_weights,
)

__all__ = [
    "CENTRE",
    "CONFIG_OPTIONS",
    "DIVIDE_BY_STD",
    "NUMERICS_OPTIONS",
    "PRESETS",
    "PRIMITIVES",
    "RLOO_FACTOR",
    "TOKEN_FIELDS",
    "AdvantageBatch",
    "BatchField",
    "EstimatorState",
    "EstimatorStates",
    "FloatArray",
    "GroupLayout",
    "IndexArray",
    "Kernels",
    "Numerics",
    "Option",
    "Ragged",
    "Resolved",
    "accelerated_centre",
    "batch_std",
    "centre",
    "constant_groups",
    "get_estimator",
    "group_means",
    "group_std",
    "inverse_scale",
    "kernel",
    "lone_groups",
    "normalise_groups",
    "numpy_only",
    "resolve_numerics",
    "resolve_plugins",
    "reverse_kl_advantages",
    "rewards_as",
    "run_estimator",
    "state_factory",
    "stateful",
    "suffix_discounted",
    "whiten",
    "whitening_weights",
]
