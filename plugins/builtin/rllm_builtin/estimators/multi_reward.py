"""Estimators for several reward components per trajectory."""

from __future__ import annotations

import numpy as np

from rllm.errors import GroupError, RewardError
from rllm.toolkit import AdvantageBatch, FloatArray, Numerics, normalise_groups, rewards_as, whiten, whitening_weights


def gdpo(
    batch: AdvantageBatch,
    *,
    component_weights: list[float] | None = None,
    norm_adv_by_std_in_grpo: bool = True,
    numerics: Numerics,
) -> FloatArray:
    """GDPO (verl; TRL ``multi_objective_aggregation="normalize_then_sum"``): normalise each reward, then sum.

    For every component ``k`` the GRPO advantage ``A_ik`` of that component alone is
    computed within the groups; ``A_i = sum_k w_k A_ik`` is then whitened over the batch
    (``numerics.whiten``; over tokens under ``whiten_weight="tokens"``, as verl). Normalising
    first stops a component with a large scale from dominating. Weights come from the
    ``component_weights`` option, else the batch field, else all 1.
    """
    components = batch.require("reward_components", "gdpo")
    weights = component_weights if component_weights is not None else batch.component_weights
    n_components = components.shape[1]
    weights = np.ones(n_components) if weights is None else np.asarray(weights, dtype=np.float64).reshape(-1)
    if len(weights) != n_components:
        raise GroupError(
            f"Estimator 'gdpo' got {len(weights)} component weights for {n_components} reward components; "
            "give one weight per component."
        )
    total = np.zeros(len(batch), dtype=numerics.np_dtype)
    for k in range(n_components):  # a loop over reward components, not groups
        xs = rewards_as(batch, numerics, components[:, k])
        scored = np.isfinite(xs)
        if scored.all():
            total += weights[k] * normalise_groups(batch, xs, numerics, "gdpo", norm_adv_by_std_in_grpo)
            continue
        if batch.nonfinite_rewards != "exclude":
            first = int(np.flatnonzero(~scored)[0])
            group = batch.layout.label(int(batch.layout.group_index[first]))
            where = batch.describe(first) if batch.describe else f"position {first} (group {group!r})"
            raise RewardError(
                f"Estimator 'gdpo': reward component {k} is NaN or infinite at {where}. "
                "Fix that reward function, or set nonfinite_rewards='exclude' to leave such values out of "
                "that component's statistics."
            )
        # Unscorable for this component only: left out of its statistics, contributing 0.
        part = batch.subset(scored)
        total[scored] += weights[k] * normalise_groups(part, xs[scored], numerics, "gdpo", norm_adv_by_std_in_grpo)
    return whiten(total, numerics, weights=whitening_weights(batch, numerics, "gdpo"))
