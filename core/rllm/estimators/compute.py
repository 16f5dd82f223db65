"""The numpy-native entry point: flat rewards and group labels in, one advantage per reward out."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from rllm.config.names import EstimatorName
from rllm.contract.fields import TOKEN_FIELDS
from rllm.estimators.batch import OPTIONAL_FIELDS, AdvantageBatch
from rllm.estimators.pipeline import invoke
from rllm.estimators.ragged import FloatArray, Ragged
from rllm.estimators.resolution import estimator_entry, resolve_plugins
from rllm.estimators.state import EstimatorState
from rllm.plugins.manager import get_plugin_manager
from rllm.plugins.registry import EstimatorEntry


def get_estimator(name: EstimatorName) -> EstimatorEntry:
    """The registered estimator for ``name``, with conflicts and unknown names reported."""
    return estimator_entry(get_plugin_manager(), name)


def run_estimator(
    name: EstimatorName | EstimatorEntry,
    batch: AdvantageBatch,
    options: Mapping[str, Any] | None = None,
    *,
    ambient: Mapping[str, Any] | None = None,
    state: EstimatorState | None = None,
    nonfinite_rewards: str = "error",
) -> FloatArray | Ragged:
    """Run the estimator registered as ``name`` on ``batch``, through the same checks as every other door.

    For composite estimators: ``options`` are checked strictly against ``name``'s declaration;
    ``ambient`` settings reach it only where it declares them. A stateful estimator gets
    ``state`` (keep it across calls, e.g. from an :class:`EstimatorStates`), or a fresh one. A
    door that resolved the estimator already (:func:`rllm.toolkit.resolve_plugins`) passes its
    entry for ``name``. ``nonfinite_rewards`` is the unscorable-reward policy of
    :func:`rllm.compute_advantages` (a bridge whose trainer leaves unscored rollouts out passes ``"exclude"``).
    """
    entry = name if isinstance(name, EstimatorEntry) else get_estimator(name)
    return invoke(entry, batch, options, ambient=ambient, state=state, nonfinite_rewards=nonfinite_rewards).advantages


def compute_advantages(
    estimator: EstimatorName,
    rewards: ArrayLike,
    group_ids: ArrayLike,
    *,
    nonfinite_rewards: str = "error",
    **options: Any,
) -> FloatArray | Ragged:
    """Advantages of ``rewards`` under the named estimator, one per reward, in input order.

    Per-step estimators (``reinforce_plus_plus``, ``gae``) return a :class:`Ragged` with one
    row of step advantages per reward instead, per-token ones (``optimal_token_baseline``) one
    row of token advantages (``per_token`` set); per-token inputs (``old_log_probs``,
    ``sum_pi_squared``, ...) are one row of numbers per reward.

    ``group_ids`` holds any hashable labels (ints, strings, tuples), in any order, with groups
    of any size; labels of different types never merge. Extra batch fields
    (``response_lengths``, ``baseline_rewards``, ``reward_components``, ``step_rewards``, ...)
    and estimator options (``preset``, ``std``, ``eps``, ...; see ``rllm estimators NAME``) are
    keyword arguments. ``nonfinite_rewards="zero"`` gives groups with a NaN or infinite reward
    zero advantage instead of raising :class:`rllm.RewardError`.

    >>> compute_advantages("grpo", [1.0, 0.0, 0.0, 0.0], [0, 0, 0, 0]).round(3).tolist()
    [1.732, -0.577, -0.577, -0.577]
    """
    resolved = resolve_plugins(estimator)  # the one lookup of this call: entry, kernels, declared fields
    extra = {name: options.pop(name) for name in (*TOKEN_FIELDS, *resolved.fields) if name in options}
    fields = {name: options.pop(name) for name in OPTIONAL_FIELDS if name in options}
    dtype = options.get("dtype") if options.get("dtype") in ("float32", "float64", np.float32, np.float64) else None
    batch = AdvantageBatch(
        rewards,
        group_ids,
        dtype=dtype or np.float64,
        extra=extra,
        kernels=resolved.kernels,
        fields=resolved.fields,
        **fields,
    )
    return invoke(resolved.entry(), batch, options, nonfinite_rewards=nonfinite_rewards).advantages
