"""Hook implementations: the module named by the ``rllm.estimators`` entry point."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

import rllm
from rllm.engine import Generation, RolloutEngine
from rllm.toolkit import AdvantageBatch, FloatArray, Numerics, Option, centre, group_std, lone_groups, rewards_as
from rllm.trainer import BackendProtocol, TaskSetup, TrainerState
from rllm.types import Step, Trajectory
from rllm.workflows import TerminationReason, Workflow


def median_baseline(rewards: list[np.ndarray], **options: Any) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Each reward minus the median of its group (grouped style: one array per group)."""
    advantages = [group - np.median(group) for group in rewards]
    return advantages, advantages


def rank(batch: rllm.AdvantageBatch) -> np.ndarray:
    """Centred rank of each reward within its group, scaled to [-1, 1]; ties share their mean rank.

    Batch style: one call for all groups. A group of one gets 0.
    """
    layout = batch.layout
    advantages = np.zeros(len(batch))
    for group, rewards in enumerate(layout.split(batch.rewards)):
        n = len(rewards)
        if n < 2:
            continue
        # Mean rank of each value: count of smaller values plus half the count of equal others.
        smaller = (rewards[None, :] < rewards[:, None]).sum(axis=1)
        equal = (rewards[None, :] == rewards[:, None]).sum(axis=1) - 1
        ranks = smaller + equal / 2.0
        scaled = 2.0 * ranks / (n - 1) - 1.0
        start = layout.starts[group]
        positions = np.arange(start, start + n) if layout.order is None else layout.order[start : start + n]
        advantages[positions] = scaled
    return advantages


def scaled_median(batch: AdvantageBatch, *, clip: float | None, numerics: Numerics) -> FloatArray:
    """Each reward minus its group's median, divided by the group std + eps; numerics follow the preset.

    Registered with ``numerics=True``, so ``preset="verl"`` (unbiased std, float32), ``std``,
    ``eps``, ``single`` and ``dtype`` work exactly as for the built-in estimators.
    """
    layout = batch.layout
    xs = rewards_as(batch, numerics)
    lone = lone_groups(layout, numerics, "scaled_median")
    centred, _ = centre(layout, xs, lone, numerics)  # for the std only
    scale = 1.0 / (group_std(layout, centred, numerics) + numerics.eps)
    medians = np.array([np.median(group) for group in layout.split(xs)], dtype=xs.dtype)
    advantages = (xs - layout.spread(medians)) * layout.spread(scale.astype(xs.dtype))
    if lone is not None:
        advantages[layout.spread(lone)] = 0.0
    return advantages if clip is None else np.clip(advantages, -clip, clip)


@rllm.hookimpl
def rllm_register_estimators(register: rllm.plugins.EstimatorRegistrar) -> None:
    register("median_baseline", median_baseline)
    register("rank", rank, style="batch", options=())
    clip = Option("clip", (float,), None, "clip advantages to [-clip, clip] (default: no clipping)", minimum=0.0)
    register("scaled_median", scaled_median, style="batch", options=[clip], numerics=True)


def by_task_only(episodes: list[rllm.Episode], *, role: str = "all") -> list[rllm.TrajectoryGroup]:
    """A grouping hook: one group per task, every role's trajectories together, under the role ``role``.

    ``role`` is an option: ``rllm.grouping_hook_options.role=...`` sets it for a run.
    """
    groups: dict[str, rllm.TrajectoryGroup] = {}
    for episode in episodes:
        group = groups.setdefault(episode.task_id, rllm.TrajectoryGroup.for_task(episode.task_id, role, [], []))
        for trajectory in episode.trajectories:
            if trajectory.steps:
                group.trajectories.append(trajectory)
                group.metadata.append({"task_id": episode.task_id, "is_correct": episode.is_correct})
    return list(groups.values())


ARMS, BEST_ARM, LEARNING_RATE = 4, 2, 0.5


def _softmax(logits: np.ndarray) -> np.ndarray:
    weights = np.exp(logits - logits.max())
    return weights / weights.sum()


class ArmEngine(RolloutEngine):
    """The rollout engine of the bandit backend: its one-token answer is an arm sampled from the current policy."""

    def __init__(self, backend: BanditBackend) -> None:
        self.backend = backend

    async def generate(self, prompt_ids: Sequence[int], max_tokens: int | None = None) -> Generation:
        probabilities = _softmax(self.backend.logits)
        arm = int(self.backend.rng.choice(ARMS, p=probabilities))
        return Generation([arm], [float(np.log(probabilities[arm]))], str(arm))


class PickArm(Workflow):
    """One step: pull an arm; reward 1 for the task's best arm."""

    async def run(self, task: dict[str, Any], uid: str, **kwargs: Any) -> rllm.Episode:
        generation = await self.rollout_engine.generate([])
        arm, logprob = generation.response_ids[0], generation.logprobs[0]
        reward = 1.0 if arm == task["best_arm"] else 0.0
        step = Step(response_ids=[arm], logprobs=[logprob], action=arm, reward=reward, done=True)
        return rllm.Episode(
            task=task,
            termination_reason=TerminationReason.ENV_DONE,
            is_correct=reward == 1.0,
            trajectories=[Trajectory(name="picker", task=task, steps=[step])],
        )


class BanditBackend(BackendProtocol):
    """A minimal backend: a softmax policy over a few arms, trained by policy gradient on rllm's advantages.

    It implements the four stages every backend must (``init_rollout_engine``,
    ``get_dataloader``, ``transform_to_backend_batch``, ``update_policy``) and brings its own
    task, so ``rllm train rllm.backend=bandit`` runs without a workflow.
    """

    def __init__(self, config: Any, **kwargs: Any) -> None:
        super().__init__(config, **kwargs)
        self.logits = np.zeros(ARMS)
        self.rng = np.random.default_rng(0)

    def init_rollout_engine(self, **kwargs: Any) -> ArmEngine:
        return ArmEngine(self)

    def builtin_task(self) -> TaskSetup:
        tasks = [{"uid": f"bandit-{i}", "best_arm": BEST_ARM} for i in range(4)]
        return TaskSetup(workflow_class=PickArm, train_dataset=tasks, val_dataset=tasks)

    def get_dataloader(self, dataset: Any, trainer_state: TrainerState) -> list[list[Any]]:
        return [list(dataset or [])]  # the whole task list is one batch

    def transform_to_backend_batch(self, trainer_state: TrainerState) -> list[Step]:
        return [step for group in trainer_state.trajectory_groups for t in group.trajectories for step in t.steps]

    async def update_policy(self, trainer_state: TrainerState) -> None:
        steps: list[Step] = trainer_state.backend_batch
        probabilities = _softmax(self.logits)
        gradient = np.zeros(ARMS)
        for step in steps:
            chosen = np.eye(ARMS)[int(step.action)]
            advantage = 0.0 if step.advantage is None else np.ravel(np.asarray(step.advantage, dtype=float))[0]
            gradient += float(advantage) * (chosen - probabilities)
        self.logits += LEARNING_RATE * gradient / max(len(steps), 1)
        trainer_state.metrics["example/p_best_arm"] = float(_softmax(self.logits)[BEST_ARM])


@rllm.hookimpl
def rllm_register_grouping_hooks(register: rllm.plugins.GroupingHookRegistrar) -> None:
    register("by_task_only", by_task_only)


@rllm.hookimpl
def rllm_register_backends(register: rllm.plugins.BackendRegistrar) -> None:
    register("bandit", BanditBackend)
