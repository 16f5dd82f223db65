"""The validation pass: the validation set rolled out ``rollout.n_val`` times, scored as pass@1 / pass@k.

The trainer runs it before training, every ``test_freq`` steps and at the end; it trains
nothing, so it shares only the run's parts (backend, workflow engine, grouping, the run's
``AlgorithmConfig``) with the training step. The metrics themselves (the unbiased pass@k) are
:mod:`rllm.trainer.pass_at_k`, importable from here too.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rllm.config.algorithm import AlgorithmConfig
from rllm.estimators.collect import collect_reward_and_advantage_from_trajectory_groups
from rllm.trainer.backend_protocol import BackendProtocol, TrainerState
from rllm.trainer.grouping import CompactFilteringConfig, GroupingHook, transform_episodes_to_trajectory_groups
from rllm.trainer.pass_at_k import pass_at_k_metrics, unbiased_pass_at_k
from rllm.types import Episode

if TYPE_CHECKING:
    from rllm.rollouts.workflow_engine import WorkflowEngine
    from rllm.trainer.trackers import Trackers

__all__ = ["Validation", "pass_at_k_metrics", "unbiased_pass_at_k"]


@dataclass
class Validation:
    """What a validation pass needs of the run: its parts, the validation set and the pass@k to report."""

    backend: BackendProtocol
    engine: WorkflowEngine
    dataset: Sequence[Any] | None
    grouping_hook: GroupingHook
    cf_config: CompactFilteringConfig
    algorithm: AlgorithmConfig
    pass_at_k: list[int]

    async def run(self, state: TrainerState, logger: Trackers | None) -> dict[str, float]:
        """Roll the set out; pass@1 / pass@k per data source, the reward metrics and any workflow problems."""
        backend, engine = self.backend, self.engine
        if self.dataset is None or not await backend.on_validation_start(state):
            return {}
        started = time.perf_counter()
        engine.set_training_step(state.global_step, mode="val", epoch=state.epoch)
        episodes: list[Episode] = []
        state.validating = True
        try:
            for batch in backend.get_dataloader(self.dataset, state):
                episodes += await backend.generate_episodes(batch, agent_workflow_engine=engine, is_validation=True)
        finally:
            state.validating = False
        metrics = pass_at_k_metrics(episodes, self.pass_at_k)
        problems = {
            key: value for key, value in engine.stats.as_metrics().items() if value and key != "workflow/attempts"
        }
        metrics.update({f"val/{key}": value for key, value in problems.items()})  # said only when there are any
        groups, _ = transform_episodes_to_trajectory_groups(episodes, self.grouping_hook, self.cf_config)
        rewards = collect_reward_and_advantage_from_trajectory_groups(groups, self.algorithm, collect_advantage=False)
        metrics.update({f"val/{key}": value for key, value in rewards.items()})
        metrics["time/validation"] = time.perf_counter() - started
        if logger is not None:
            logger.log(metrics, step=state.global_step, kind="val", epoch=state.epoch)
        await backend.on_validation_end(state)
        return metrics
