"""What a training backend implements, and the state the trainer hands to it at every stage.

A backend owns the model: it builds the rollout engine workflows sample from, batches the
data, turns trajectory groups into its own tensors, and updates the policy. The trainer owns
everything backend-agnostic: running workflows, grouping, filtering, advantages, logging,
validation and checkpoints. Backends are plugins registered through
``rllm_register_backends`` and chosen by name with ``rllm.backend``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig

from rllm.config.algorithm import AlgorithmConfig
from rllm.engine import RolloutEngine
from rllm.errors import DataError, TrainerError
from rllm.estimators.collect import collect_advantages
from rllm.estimators.state import EstimatorStates
from rllm.rollouts.policy import RolloutWeights
from rllm.types import Episode, TrajectoryGroup

if TYPE_CHECKING:
    from rllm.rollouts.parallel import ProcessGroup
    from rllm.rollouts.workflow_engine import WorkflowEngine
    from rllm.workflows.workflow import Workflow


@dataclass
class TrainerState:
    """Everything one training step produces, plus the counters a checkpoint must restore.

    ``global_step`` counts completed training steps (the step being trained while a batch
    runs); ``batches_done`` counts the batches of the current epoch already trained, so a
    resumed run skips exactly those. ``validating`` is True while validation runs, so
    ``get_dataloader`` can batch the validation set differently.
    """

    global_step: int = 0
    epoch: int = 0
    batches_done: int = 0
    total_steps: int = 0
    episodes: list[Episode] = field(default_factory=list)
    trajectory_groups: list[TrajectoryGroup] = field(default_factory=list)
    backend_batch: Any = None
    metrics: dict[str, float] = field(default_factory=dict)
    timing_dict: dict[str, float] = field(default_factory=dict)
    rs_state: Any = None
    extra_info: dict[str, Any] = field(default_factory=dict)
    validating: bool = False
    estimator_states: EstimatorStates = field(default_factory=EstimatorStates)
    """The run's stateful estimators' states (checkpointed); pass them to the collection step."""
    sampling_state: Any = None
    """Dynamic sampling's position in its refill order (checkpointed)."""
    policy_version: int = 0
    """Policy updates so far (checkpointed; a resumed run continues it): the version of the weights trained now."""
    pending: list[Any] = field(default_factory=list)
    """The batches sampled and not yet trained (:class:`rllm.rollouts.batch_source.SampledBatch` as JSON,
    checkpointed)."""

    def reset_batch(self) -> None:
        """Forget the previous step's data; counters and the rejection-sampling state survive."""
        self.episodes = []
        self.trajectory_groups = []
        self.backend_batch = None
        self.metrics = {}
        self.timing_dict = {}
        self.extra_info = {}

    @property
    def has_episodes(self) -> bool:
        return bool(self.episodes)

    @property
    def has_trajectory_groups(self) -> bool:
        return bool(self.trajectory_groups)

    @property
    def has_backend_batch(self) -> bool:
        return self.backend_batch is not None


@dataclass
class TaskSetup:
    """A backend's built-in task: the workflow to run and the datasets to run it on."""

    workflow_class: type[Workflow]
    train_dataset: Sequence[dict[str, Any]]
    val_dataset: Sequence[dict[str, Any]]
    workflow_args: dict[str, Any] = field(default_factory=dict)


def task_id_of(task: Any, position: int) -> str:
    """The id a task's episodes are named after: its ``uid``, ``task_id`` or ``id`` field."""
    if isinstance(task, dict):
        for key in ("uid", "task_id", "id"):
            if task.get(key) is not None:
                return str(task[key])
    raise DataError(
        f"Task at position {position} of the batch has no 'uid', 'task_id' or 'id' field; give every "
        "task dict a stable id so its rollouts can be grouped."
    )


class BackendProtocol:
    """Base class of training backends. Override the stages; the hooks default to doing nothing.

    Constructed as ``backend_cls(config=config, algorithm=algorithm, **backend_args)``: ``algorithm`` is the
    run's :class:`AlgorithmConfig`, built once by the trainer (with its keyword arguments, such as
    ``traj_group_adv_estimator_map``, applied), so a backend reads ``self.algorithm`` and never
    rebuilds it from ``config``, which would miss them. The stage methods run in
    this order for every training batch: :meth:`generate_episodes`, (grouping and filtering
    by the trainer), :meth:`transform_to_backend_batch`, :meth:`process_backend_batch`,
    :meth:`compute_advantages`, :meth:`update_policy`.
    """

    batch_fields: frozenset[str] = frozenset()
    """The per-token batch fields this backend fills on the steps before advantages are computed
    (``old_log_probs``, ``rollout_log_probs``, ``entropy``, ``sum_pi_squared``): a run whose estimator
    needs one it lacks is refused before anything is built."""

    def __init__(self, config: DictConfig, algorithm: AlgorithmConfig | None = None, **kwargs: Any) -> None:
        if algorithm is None:
            raise TrainerError(
                f"Backend {type(self).__name__} was built without the run's AlgorithmConfig; pass on the "
                "trainer's keyword arguments: super().__init__(config, **kwargs)."
            )
        self.config = config
        self.algorithm = algorithm
        """The run's algorithm settings: the object the trainer hands to the collection step too."""

    # -- setup ------------------------------------------------------------------------
    def init_rollout_engine(self, **kwargs: Any) -> RolloutEngine:
        """Build what workflows sample from (an :class:`~rllm.engine.rollout.rollout_engine.RolloutEngine`). Receives
        the trainer's parsed
        configs as keywords."""
        raise NotImplementedError(f"{type(self).__name__} must implement init_rollout_engine()")

    def validate_config(self) -> None:
        """Reject settings this backend cannot honour, raising :class:`rllm.ConfigError`."""

    @property
    def loss_description(self) -> str | None:
        """The policy loss this backend trains with and its options, named by ``rllm train``'s start line.

        None (the default): the start line names ``rllm.algorithm.loss_fn`` as configured.
        """
        return None

    @property
    def process_group(self) -> ProcessGroup | None:
        """This process's place in a data-parallel run (:mod:`rllm.rollouts.parallel`); None (the default): the run
        is this one process. With a group, each process rolls out its share of a batch and only rank 0 writes."""
        return None

    @property
    def rollout_weights(self) -> RolloutWeights:
        """What this backend does for the policy channel (:mod:`rllm.rollouts.policy`): snapshot its trained weights,
        load weights where its engine samples, describe them to a weight sync. The trainer's
        :class:`~rllm.rollouts.policy.PolicyVersions` does the rest: numbering versions, publishing, refreshing and
        re-syncing servers. The default suits an engine that samples the trained weights themselves."""
        return RolloutWeights()

    def get_dataloader(self, dataset: Sequence[Any] | None, trainer_state: TrainerState) -> Iterable[Any]:
        """Batches of tasks for one pass over ``dataset``; called once per epoch and for validation."""
        raise NotImplementedError(f"{type(self).__name__} must implement get_dataloader()")

    def builtin_task(self) -> TaskSetup | None:
        """The task to train on when the user gives no workflow (``rllm train``); None if there is none."""
        return None

    def shutdown(self) -> None:
        """Release engines, workers and files."""

    # -- checkpoints --------------------------------------------------------------------
    def prepare_checkpoint(self) -> None:
        """Called on every rank just before rank 0 alone runs :meth:`save_checkpoint`: gather sharded state here."""

    def save_checkpoint(self, directory: Path) -> None:
        """Write the policy and optimizer state into ``directory`` (which the trainer makes atomic)."""

    def load_checkpoint(self, directory: Path) -> None:
        """Restore what :meth:`save_checkpoint` wrote."""

    # -- pipeline stages --------------------------------------------------------------------
    async def generate_episodes(
        self, batch: Sequence[Any], agent_workflow_engine: WorkflowEngine, is_validation: bool = False
    ) -> list[Episode]:
        """Run every task of ``batch`` ``rollout.n`` times (``rollout.n_val`` when validating)."""
        rollout = self.config.rllm.rollout
        repeats = int(rollout.n_val if is_validation else rollout.n)
        tasks = [task for task in batch for _ in range(repeats)]
        ids = [task_id_of(task, position // repeats) for position, task in enumerate(tasks)]
        return await agent_workflow_engine.execute_tasks(
            tasks, ids, is_validation=is_validation, share=self.process_group
        )

    def transform_to_backend_batch(self, trainer_state: TrainerState) -> Any:
        """Turn ``trainer_state.trajectory_groups`` into this backend's batch format."""
        raise NotImplementedError(f"{type(self).__name__} must implement transform_to_backend_batch()")

    async def process_backend_batch(self, trainer_state: TrainerState) -> None:
        """Fill in what the update needs before advantages (reference log-probs, values, ...)."""

    async def compute_advantages(self, trainer_state: TrainerState, algorithm_config: AlgorithmConfig) -> None:
        """Write ``step.advantage`` on every step of the groups, with rllm's estimators.

        A backend that overrides this passes ``trainer_state.estimator_states`` to
        :func:`rllm.estimators.collect.collect_advantages`, so stateful estimators keep their
        state across steps and checkpoints.
        """
        collected = collect_advantages(
            trainer_state.trajectory_groups, algorithm_config, states=trainer_state.estimator_states
        )
        trainer_state.metrics.update(collected.metrics)

    async def update_policy(self, trainer_state: TrainerState) -> None:
        """One policy update from the processed batch and its advantages."""
        raise NotImplementedError(f"{type(self).__name__} must implement update_policy()")

    # -- hooks ------------------------------------------------------------------------------
    async def on_policy_updated(self, trainer_state: TrainerState) -> None:
        """Right after every :meth:`update_policy` (rLLM's name), before the trainer's
        :class:`~rllm.rollouts.policy.PolicyVersions` takes the new weights to where rollouts sample (through
        :attr:`rollout_weights`); raising stops the run before a step trains on the old weights.
        """

    async def on_train_start(self, trainer_state: TrainerState) -> None:
        """Before the first step (after a resume, before the first resumed step)."""

    async def on_train_end(self, trainer_state: TrainerState) -> None:
        """After the last step and the final validation."""

    async def on_epoch_start(self, trainer_state: TrainerState) -> None:
        """Before the first batch of an epoch."""

    async def on_epoch_end(self, trainer_state: TrainerState) -> None:
        """After the last batch of an epoch."""

    async def on_batch_start(self, trainer_state: TrainerState) -> None:
        """When a step starts training, its batch sampled already (by the batch source, which may have sampled it
        ahead: ``rllm.async_training``)."""

    async def on_batch_end(self, trainer_state: TrainerState) -> None:
        """After a training batch's update, before its metrics are logged."""

    async def on_validation_start(self, trainer_state: TrainerState) -> bool:
        """Before validation; return False to skip it."""
        return True

    async def on_validation_end(self, trainer_state: TrainerState) -> None:
        """After validation metrics are computed."""
