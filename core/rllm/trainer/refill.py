"""Dynamic sampling applied to one step's batch: refill rounds (``drop``) or in-batch copies (``replace``).

The policy (what counts as uniform, the refill order, the copies) is :mod:`rllm.trainer.dynamic_sampling`;
this module runs it on a batch and reports the effective batch. A refill round's generation,
grouping and filtering stay the trainer's: it hands them in as ``generate_round``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from rllm.errors import TrainerError
from rllm.trainer.backend_protocol import TrainerState, task_id_of
from rllm.trainer.dynamic_sampling import DynamicSamplingConfig, SamplingState, informative, refill_tasks, substitute
from rllm.trainer.rejection import episodes_of
from rllm.types import Episode, TrajectoryGroup

GenerateRound = Callable[[list[Any]], Awaitable[tuple[list[TrajectoryGroup], list[Episode]]]]
"""Tasks -> the groups and episodes they leave after grouping and rejection sampling."""


async def apply_dynamic_sampling(
    groups: list[TrajectoryGroup],
    episodes: list[Episode],
    state: TrainerState,
    config: DynamicSamplingConfig,
    dataset: Sequence[Any] | None,
    generate_round: GenerateRound,
) -> tuple[list[TrajectoryGroup], list[Episode]]:
    """Drop or replace uniform groups (see :mod:`rllm.trainer.dynamic_sampling`); the effective batch is reported."""
    keep = informative(groups, config)
    target, rounds, dropped, replaced = len(groups), 1, keep.count(False), 0
    if config.enabled and config.strategy == "drop":
        kept = [group for group, flag in zip(groups, keep, strict=True) if flag]
        every_episode = list(episodes)
        seen = {episode.task_id for episode in state.episodes}
        if state.sampling_state is None:
            state.sampling_state = SamplingState()
        if dataset is None:
            raise TrainerError("Dynamic sampling refills from the training set, but this run has none.")
        while len(kept) < target and rounds < config.max_rounds:
            tasks = refill_tasks(dataset, target - len(kept), seen, state.sampling_state, task_id_of)
            if not tasks:
                break
            rounds += 1
            more, fresh = await generate_round(tasks)
            flags = informative(more, config)
            dropped += flags.count(False)
            kept += [group for group, flag in zip(more, flags, strict=True) if flag]
            every_episode += fresh
        groups = kept[:target]
        episodes = episodes_of(groups, every_episode)
    elif config.enabled:
        groups, replaced = substitute(groups, keep, state.global_step)
    metrics = state.metrics
    metrics["sampling/target_groups"] = float(target)
    # disabled, the groups are the ones flagged above: their spreads are not taken twice
    effective = keep if not config.enabled else informative(groups, config)
    metrics["sampling/effective_groups"] = float(sum(effective))
    metrics["sampling/groups_uniform"] = float(dropped)
    if config.enabled:
        metrics["sampling/rounds"] = float(rounds)
        metrics["sampling/groups_replaced"] = float(replaced)
    return groups, episodes
