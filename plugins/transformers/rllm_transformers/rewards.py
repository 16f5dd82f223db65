"""KL in the reward for a batch of steps: where the per-token penalty goes, since rewards are per step.

rllm's estimators read a reward per trajectory (outcome estimators: GRPO, RLOO, ...) or per
step (``step_rewards``: REINFORCE++, GAE, turn-level GRPO), never per token. verl puts the
penalty into ``token_level_rewards``, and its outcome estimators then score a response by the
sum of those; so here each step's reward loses ``coef * sum(KL)`` over its own response
tokens, and its trajectory's reward the sum over the trajectory's trained steps. An outcome
estimator thus sees exactly verl's penalised score, a per-step estimator each step's own
share; every token of a step then gets the step's advantage, as without the penalty.
"""

from __future__ import annotations

from collections.abc import Sequence

from rllm import AlgorithmConfig, get_estimator
from rllm.errors import ConfigError
from rllm.types import Step, TrajectoryGroup

UNREACHED_FIELDS = ("reward_components",)
"""Estimator inputs that replace the rewards: an estimator requiring one never sees the penalty."""


def check_estimators_see_the_penalty(algorithm: AlgorithmConfig) -> None:
    """Refuse ``use_kl_in_reward`` with an estimator that scores from reward components instead of rewards."""
    if not algorithm.use_kl_in_reward:
        return
    for name in dict.fromkeys([algorithm.estimator, *algorithm.estimator_map.values()]):
        entry = get_estimator(name)
        fields = [field for field in entry.requires if field in UNREACHED_FIELDS]
        if fields:
            raise ConfigError(
                f"rllm.algorithm.use_kl_in_reward=true lowers the rewards, but estimator {entry.name!r} reads "
                f"{', '.join(fields)} instead, so the penalty would not reach it; use another estimator or the "
                "KL loss (use_kl_loss)."
            )


def subtract_from_rewards(
    groups: Sequence[TrajectoryGroup], steps: Sequence[Step], penalties: Sequence[float]
) -> dict[str, float]:
    """Subtract ``penalties[i]`` (step ``i``'s summed token penalty) from its step's and trajectory's reward.

    A trajectory whose reward is None (unscored) keeps it; its steps are still penalised. The
    metric is the mean penalty of a trajectory.
    """
    by_step = {id(step): float(amount) for step, amount in zip(steps, penalties, strict=True)}
    totals: list[float] = []
    for group in groups:
        for trajectory in group.trajectories:
            total = 0.0
            for step in trajectory.steps:
                amount = by_step.pop(id(step), None)
                if amount is None:
                    continue
                step.reward = float(step.reward) - amount
                total += amount
            if trajectory.reward is not None:
                trajectory.reward = float(trajectory.reward) - total
            totals.append(total)
    return {"kl_in_reward/penalty": sum(totals) / len(totals)} if totals else {}
