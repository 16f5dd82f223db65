"""The rows :mod:`rllm_verl.upstream.transform` gathers before it pads them into a ``DataProto`` (rLLM's names).

One :class:`ProcessedStepData` is one batch row (a step, or a multi-turn trajectory's merged
steps); :class:`AccumulatedData` keeps one entry per row in each list, in step with the others.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class ProcessedStepData:
    """One row: its prompt, its response (replies and later observations) and the mask of the replies."""

    prompt: torch.Tensor
    response: torch.Tensor
    mask: torch.Tensor
    step_reward: float
    step_id: str
    advantage: float | list[float] | None = None
    logprobs: list[float] | None = None
    """The sampler's log-prob of each response token (0 on observation tokens), or None when it gave none."""


@dataclass
class AccumulatedData:
    """Every row's parts, one list entry per row (``rollout_logprobs`` only for rows that have them)."""

    prompts: list[torch.Tensor] = field(default_factory=list)
    responses: list[torch.Tensor] = field(default_factory=list)
    traj_mask: list[torch.Tensor] = field(default_factory=list)
    traj_rewards: list[float] = field(default_factory=list)
    step_rewards: list[float] = field(default_factory=list)
    trajectory_ids: list[str] = field(default_factory=list)
    step_ids: list[str] = field(default_factory=list)
    step_nums: list[int] = field(default_factory=list)
    is_last_step: list[bool] = field(default_factory=list)
    advantages: list[float | list[float]] = field(default_factory=list)
    group_roles: list[str] = field(default_factory=list)
    rollout_logprobs: list[torch.Tensor] = field(default_factory=list)

    def add_step(
        self,
        step_data: ProcessedStepData,
        trajectory_id: str,
        traj_reward: float,
        step_num: int,
        is_last: bool,
        group_role: str = "",
    ) -> None:
        """Append one row to every list (``step_num``: how many steps its trajectory has)."""
        self.prompts.append(step_data.prompt)
        self.responses.append(step_data.response)
        self.traj_mask.append(step_data.mask)
        self.traj_rewards.append(traj_reward)
        self.step_rewards.append(step_data.step_reward)
        self.trajectory_ids.append(trajectory_id)
        self.step_ids.append(step_data.step_id)
        self.step_nums.append(step_num)
        self.is_last_step.append(is_last)
        self.group_roles.append(group_role)
        if step_data.advantage is not None:
            self.advantages.append(step_data.advantage)
        if step_data.logprobs:
            self.rollout_logprobs.append(torch.tensor(step_data.logprobs, dtype=torch.float32))

    def __len__(self) -> int:
        return len(self.prompts)
