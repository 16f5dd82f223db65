"""Estimators that keep state across training steps (see rllm.toolkit.stateful)."""

from __future__ import annotations

from typing import Any

import numpy as np

from rllm.errors import EstimatorOptionError
from rllm.toolkit import AdvantageBatch, FloatArray, stateful


class EMABaselines:
    """One exponential moving average of the reward per key (a task id, or a role)."""

    def __init__(self) -> None:
        self.baselines: dict[str, float] = {}

    def state_dict(self) -> dict[str, Any]:
        return {"baselines": dict(self.baselines)}

    def load_state_dict(self, data: dict[str, Any]) -> None:
        self.baselines = {str(key): float(value) for key, value in data["baselines"].items()}


def state_key(label: Any) -> str:
    """A task's key in the saved state (JSON keys are strings): a string as it is, another label tagged with its type.

    ``str(label)`` alone would give 1, 1.0, True and "1" one baseline.
    """
    value = label.item() if isinstance(label, np.generic) else label
    return value if isinstance(value, str) else f"<{type(value).__name__}> {value!r}"


@stateful(EMABaselines)
def ema_baseline(batch: AdvantageBatch, *, state: EMABaselines, decay: float = 0.9, key: str = "task") -> FloatArray:
    """Reward minus a moving-average baseline per task (or per role) kept across steps.

    Tasks are the batch's ``task_ids`` (the trainer fills them), or else its group labels.

    For each key in the batch, with ``m`` the mean of this batch's rewards for it: a key seen
    before has baseline ``b``, its rollouts get ``r - b`` and then ``b <- decay*b + (1-decay)*m``;
    a key seen for the first time starts at ``b = m`` (its rollouts get ``r - m``).
    """
    if not 0.0 <= decay < 1.0:
        raise EstimatorOptionError(f"Option 'decay' of estimator 'ema_baseline' must be in [0, 1); got {decay!r}.")
    rewards = np.asarray(batch.rewards, dtype=np.float64)
    if key == "task":
        task_ids = getattr(batch, "task_ids", None)
        if task_ids is None:  # groups are tasks (rllm advantages, compute_advantages without task_ids)
            layout = batch.layout
            group_labels = [state_key(layout.label(g)) for g in range(layout.n_groups)]
            labels = [group_labels[g] for g in layout.group_index.tolist()]
        else:
            labels = [state_key(label) for label in task_ids]
    else:
        roles = getattr(batch, "roles", None)
        labels = ["all" if roles is None else state_key(role) for role in (roles if roles is not None else rewards)]
    names, inverse = np.unique(np.asarray(labels, dtype=object).astype(str), return_inverse=True)
    means = np.bincount(inverse, weights=rewards, minlength=len(names)) / np.bincount(inverse, minlength=len(names))
    baselines = np.empty(len(names))
    for i, name in enumerate(names.tolist()):
        old = state.baselines.get(name)
        baselines[i] = means[i] if old is None else old
        state.baselines[name] = float(means[i]) if old is None else decay * old + (1.0 - decay) * float(means[i])
    return rewards - baselines[inverse]
