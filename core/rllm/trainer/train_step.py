"""Stages 2-8 of one training step, on a batch the batch source sampled.

(2) the grouping hook turns the episodes into trajectory groups, (3) rejection sampling,
filtering and dynamic sampling, (4) the backend converts the groups to its batch, (5)
processes it (log-probs, ...), (6) advantages are computed with rllm's estimators, (7) the
backend updates the policy and the policy channel takes the new weights to where rollouts
sample, (8) the step's metrics. An empty stage ends the step without an update.
"""

from __future__ import annotations

import asyncio
import math
import warnings
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from rllm.config.algorithm import AlgorithmConfig
from rllm.errors import RLLMWarning, TrainerError
from rllm.estimators.collect import collect_advantages
from rllm.rollouts.batch_source import SampledBatch
from rllm.rollouts.policy import PolicyVersions, lag_metrics
from rllm.rollouts.workflow_engine import WorkflowEngine
from rllm.trainer.async_training import UpdateThread
from rllm.trainer.backend_protocol import BackendProtocol, TrainerState
from rllm.trainer.grouping import GroupingHook, check_estimator_roles, transform_episodes_to_trajectory_groups
from rllm.trainer.refill import apply_dynamic_sampling
from rllm.trainer.rejection import apply_rejection_sampling_and_filtering
from rllm.trainer.run_report import FILTERED, RunReport
from rllm.trainer.run_settings import RunSettings
from rllm.trainer.step_metrics import episode_metrics, stage_timer
from rllm.types import Episode, TrajectoryGroup


def _finite_floats(groups: Sequence[TrajectoryGroup]) -> bool:
    """Whether every reward of ``groups`` is a finite float, which the reward check of stage 6 accepts: only a batch
    with another reward needs the check run before the filters (it costs about what the estimator does)."""
    rewards = [trajectory.reward for group in groups for trajectory in group.trajectories]
    return all(type(reward) is float for reward in rewards) and math.isfinite(sum(rewards))


class TrainStep:
    """Trains one sampled batch: the same stages for the synchronous and the asynchronous run."""

    def __init__(
        self,
        backend: BackendProtocol,
        engine: WorkflowEngine,
        policy: PolicyVersions,
        settings: RunSettings,
        grouping_hook: GroupingHook,
        train_dataset: Sequence[Any] | None,
        report: RunReport,
        staleness: int,
    ) -> None:
        self.backend = backend
        self.engine = engine
        self.policy = policy
        self.algorithm: AlgorithmConfig = settings.algorithm
        self.cf_config, self.rs_config, self.ds_config = settings.cf, settings.rs, settings.ds
        self.grouping_hook = grouping_hook
        self.train_dataset = train_dataset
        self.report = report
        self.staleness = staleness
        self._unused_roles_warned: set[str] = set()

    async def run(self, state: TrainerState, sampled: SampledBatch, updates: UpdateThread | None) -> None:
        """Stages 2-8 on ``sampled`` (already in ``state.episodes``); stages 4-7 on ``updates``' thread when given."""
        timings = state.timing_dict
        state.metrics.update(episode_metrics(state.episodes))
        state.metrics.update(lag_metrics(state.episodes, self.policy.version, self.staleness))
        if not state.has_episodes:
            state.metrics["batch/updated"] = 0.0
            self.report.no_episodes(state.global_step, sampled.stats)
            return
        with stage_timer("group", timings):  # stages 2 and 3
            groups, transform_metrics = self.grouped(state.episodes)
            self._warn_unused_roles(groups)
            groups, episodes, rs_metrics = apply_rejection_sampling_and_filtering(
                state.episodes, groups, self.rs_config, state.rs_state
            )
        state.metrics.update(transform_metrics)
        state.metrics.update(rs_metrics)
        refill: Callable[..., Any] = partial(self._generate_round, state=state, version=sampled.version)
        with stage_timer("dynamic_sampling", timings):
            groups, episodes = await apply_dynamic_sampling(
                groups, episodes, state, self.ds_config, self.train_dataset, refill
            )
        self.policy.label_groups(groups, sampled.version)
        state.trajectory_groups, state.episodes = groups, episodes
        state.metrics["batch/updated"] = float(state.has_trajectory_groups)
        if not state.has_trajectory_groups:
            if not state.rs_state.groups:  # episode-mode rejection sampling holds them back, as configured
                self.report.untrained_step(state.global_step, FILTERED)
            return
        if updates is None:
            await self._update(state)
        else:
            await updates.run(self._update(state))

    async def _update(self, state: TrainerState) -> None:
        """Stages 4-7, then the new weights to the policy channel."""
        timings = state.timing_dict
        with stage_timer("backend_batch", timings):  # stages 4 and 5
            state.backend_batch = self.backend.transform_to_backend_batch(state)
            await self.backend.process_backend_batch(state)
        if not state.has_backend_batch:
            raise TrainerError(
                f"Backend {type(self.backend).__name__} left trainer_state.backend_batch empty; "
                "transform_to_backend_batch must return the batch."
            )
        with stage_timer("advantage", timings):  # stage 6
            await self.backend.compute_advantages(state, self.algorithm)
        with stage_timer("update", timings):  # stage 7
            await self.backend.update_policy(state)
        with stage_timer("weight_sync", timings):
            await self.backend.on_policy_updated(state)
            await asyncio.to_thread(self.policy.updated, state)

    def grouped(self, episodes: Sequence[Episode]) -> tuple[list[TrajectoryGroup], dict[str, float]]:
        """Stage 2, then the reward check of ``nonfinite_rewards=error`` before any filter can drop a group unseen.

        Rejection and dynamic sampling would otherwise discard a group with a NaN reward (as
        uniform, or too small) and the run would train on without the RewardError naming it.
        """
        groups, metrics = transform_episodes_to_trajectory_groups(episodes, self.grouping_hook, self.cf_config)
        if self.algorithm.nonfinite_rewards == "error" and not _finite_floats(groups):
            collect_advantages(groups, self.algorithm, write_steps=False, collect_advantage=False)
        return groups, metrics

    async def _generate_round(
        self, tasks: list[Any], state: TrainerState, version: int
    ) -> tuple[list[TrajectoryGroup], list[Episode]]:
        """Stages 1-3 for the tasks of a dynamic-sampling refill round (its grouping metrics are not logged)."""
        fresh = await self.backend.generate_episodes(tasks, agent_workflow_engine=self.engine)
        self.policy.check(fresh, version)
        more, _ = self.grouped(fresh)
        more, fresh, _ = apply_rejection_sampling_and_filtering(fresh, more, self.rs_config, state.rs_state)
        return more, fresh

    def _warn_unused_roles(self, groups: Sequence[Any]) -> None:
        for role in check_estimator_roles(groups, self.algorithm.estimator_map):
            if role not in self._unused_roles_warned:
                self._unused_roles_warned.add(role)
                roles = sorted({g.group_role for g in groups})
                warnings.warn(
                    f"rllm.algorithm.estimator_map names role {role!r}, but this batch's groups have roles "
                    f"{roles}; check the spelling (its estimator is not used).",
                    RLLMWarning,
                    stacklevel=3,
                )
