"""The numpy-native entry point: flat rewards and group labels in, one advantage per reward out."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from rllm.config.algorithm import EstimatorName, estimator_name, rLLMAdvantageEstimator
from rllm.errors import EstimatorNotFoundError, RewardError
from rllm.estimators.batch import OPTIONAL_FIELDS, AdvantageBatch, FloatArray, Ragged
from rllm.estimators.call import first_nonfinite, run_estimator
from rllm.plugins.manager import get_plugin_manager
from rllm.plugins.registry import EstimatorEntry


def get_estimator(name: EstimatorName) -> EstimatorEntry:
    """The registered estimator for ``name``, with conflicts and unknown names reported."""
    if name is rLLMAdvantageEstimator.OTHER:
        raise EstimatorNotFoundError(
            "rLLMAdvantageEstimator.OTHER only marks a custom estimator; name the estimator by its "
            "registered string instead (e.g. adv_estimator: my_estimator)."
        )
    return get_plugin_manager().estimators.resolve(estimator_name(name))


def check_finite_rewards(batch: AdvantageBatch) -> None:
    """Reject NaN or infinite rewards, naming the first group that has one."""
    found = first_nonfinite(batch.rewards)
    if found is not None:
        first, count = found
        group = batch.layout.label(int(batch.layout.group_index[first]))
        raise RewardError(
            f"{count} reward(s) are NaN or infinite; the first, at position {first}, is in group "
            f"{group!r} (value {batch.rewards[first]}). Fix the reward function, or drop those rollouts."
        )


def compute_advantages(
    estimator: EstimatorName,
    rewards: ArrayLike,
    group_ids: ArrayLike,
    **options: Any,
) -> FloatArray | Ragged:
    """Advantages of ``rewards`` under the named estimator, one per reward, in input order.

    Per-step estimators (``reinforce_plus_plus``, ``gae``) return a :class:`Ragged` with one
    row of step advantages per reward instead.

    ``group_ids`` holds any hashable labels (ints, strings), in any order, with groups of
    any size. Extra batch fields (``response_lengths``, ``baseline_rewards``,
    ``reward_components``, ``step_rewards``, ...) and estimator options (``preset``,
    ``std``, ``eps``, ...) are keyword arguments.

    >>> compute_advantages("grpo", [1.0, 0.0, 0.0, 0.0], [0, 0, 0, 0]).round(3).tolist()
    [1.732, -0.577, -0.577, -0.577]
    """
    entry = get_estimator(estimator)
    fields = {name: options.pop(name) for name in OPTIONAL_FIELDS if name in options}
    dtype = options.get("dtype") or np.float64
    batch = AdvantageBatch(rewards, group_ids, dtype=dtype, **fields)
    check_finite_rewards(batch)
    return run_estimator(entry, batch, options)
