"""One rllm batch the verl tests share: two groups of random tokens, one trajectory of two turns."""

from __future__ import annotations

import torch

from rllm.types import Step, Trajectory, TrajectoryGroup


def two_groups(
    vocab: int, seed: int = 0, roles: tuple[str, str] | None = None, sampler: bool = False
) -> list[TrajectoryGroup]:
    """Two groups of random tokens; one trajectory has two turns, the second prompt extending the first.

    ``roles``: the two groups' roles (``g0:<role>``); ``sampler``: each response token gets a sampler log-prob
    drawn from [-4.5, -1.5] (a sampler unlike the tiny model, whose old log-probs are near -log(vocab)).
    """
    g = torch.Generator().manual_seed(seed)

    def tokens(n: int) -> list[int]:
        return torch.randint(3, vocab, (n,), generator=g).tolist()

    def advantage() -> float:
        return float(torch.randn((), generator=g))

    groups = []
    for index, shapes in enumerate([[(4, 5), (3, 7), (5, 2)], [(6, 4), (2, 6)]]):
        trajectories = [Trajectory(steps=[Step(prompt_ids=tokens(p), response_ids=tokens(r))]) for p, r in shapes]
        group_id = f"g{index}" if roles is None else f"g{index}:{roles[index]}"
        groups.append(TrajectoryGroup(trajectories=trajectories, group_id=group_id))
    first = groups[0].trajectories[0].steps[0]
    second = Step(prompt_ids=first.prompt_ids + first.response_ids + tokens(3), response_ids=tokens(4))
    groups[0].trajectories[0].steps.append(second)  # the observation's 3 tokens sit in the row with mask 0
    for group in groups:
        for trajectory in group.trajectories:
            for step in trajectory.steps:
                step.advantage = advantage()
    if sampler:  # its own generator: the tokens and advantages stay those of the plain batch
        draws = torch.Generator().manual_seed(seed + 1000)
        for group in groups:
            for trajectory in group.trajectories:
                for step in trajectory.steps:
                    values = -1.5 - 3.0 * torch.rand(len(step.response_ids), generator=draws)
                    step.logprobs = values.tolist()
    return groups
