"""What a run's steps did not train on, said on stderr each step and at the end of the run.

A step can end without a policy update (the failure policy dropped every group, or every
group was uniform or filtered out), and rollouts can time out and leave their groups without
them. Each is counted in the step's metrics already; this says it too, so a run that trained
on little or nothing never ends looking like a normal one. A run none of whose steps updated
the policy ends in an error unless ``rllm.trainer.require_update`` is false.
"""

from __future__ import annotations

import warnings
from collections import Counter
from dataclasses import dataclass, field

from rllm.errors import RLLMWarning, TrainerError
from rllm.rollouts.workflow_engine import EngineStats

DROPPED = "failure_policy=drop_group dropped every group (their workflows failed)"
FILTERED = "every group was uniform or filtered out"
EMPTY = "the batch had no episode"
HINTS = {
    DROPPED: "see workflow/failed and the episode logs (rllm.episode_logging.log_episodes=true)",
    FILTERED: "check the rewards (do they vary within a group?) and rllm.dynamic_sampling",
}


@dataclass
class RunReport:
    """Counts of this process's steps: run, left untrained (by reason), and their timed-out rollouts."""

    steps: int = 0
    untrained: Counter[str] = field(default_factory=Counter)
    timeouts: int = 0
    attempts: int = 0

    def no_episodes(self, step: int, stats: EngineStats) -> None:
        """Count and say a step left without episodes: the failure policy dropped every group, or none came."""
        detail = None
        if stats.dropped_groups:
            detail = (
                f"failure_policy=drop_group dropped every group ({stats.dropped_groups} groups, "
                f"{stats.dropped_rollouts} rollouts: their workflows failed)"
            )
        self.untrained_step(step, DROPPED if stats.dropped_groups else EMPTY, detail)

    def untrained_step(self, step: int, reason: str, detail: str | None = None) -> None:
        """Count a step that updated nothing, and say it now."""
        self.untrained[reason] += 1
        warnings.warn(
            f"step {step}: nothing to train on: {detail or reason}; the policy was not updated.",
            RLLMWarning,
            stacklevel=3,
        )

    def step_done(self, step: int, stats: EngineStats, timeout: float | None) -> None:
        """Count the step and its timed-out rollouts; a step with any says how many, now."""
        self.steps += 1
        self.timeouts += stats.timeouts
        self.attempts += stats.attempts
        if stats.timeouts:
            limit = "" if timeout is None else f" (rllm.workflow.timeout={timeout:g} s)"
            warnings.warn(
                f"step {step}: {stats.timeouts} of {stats.attempts} rollouts timed out{limit}, counted in "
                "workflow/timeouts; a rollout the engine stopped has no trajectory, so its group trains without it. "
                "Raise the timeout or make the workflow faster.",
                RLLMWarning,
                stacklevel=3,
            )

    def finish(self, require_update: bool) -> None:
        """The run's totals; an error if no step of it updated the policy and ``require_update``."""
        untrained = sum(self.untrained.values())
        reasons = "; ".join(
            f"{reason} in {count} ({HINTS[reason]})" if reason in HINTS else f"{reason} in {count}"
            for reason, count in self.untrained.items()
        )
        timeouts = (
            f"{self.timeouts} of this run's {self.attempts} rollouts timed out (workflow/timeouts)."
            if self.timeouts
            else ""
        )
        if self.steps and untrained == self.steps and require_update:
            raise TrainerError(
                f"No step of this run updated the policy ({untrained} of {self.steps}: {reasons}). "
                f"{timeouts + ' ' if timeouts else ''}Fix the cause, or set rllm.trainer.require_update=false to "
                "let such a run end normally."
            )
        if untrained:
            warnings.warn(f"{untrained} of this run's steps trained nothing: {reasons}.", RLLMWarning, stacklevel=3)
        if timeouts:
            warnings.warn(timeouts, RLLMWarning, stacklevel=3)
