"""The backend-agnostic trainer: builds a run's parts from its config, then trains, validates, saves and resumes.

Each step takes a batch from the rollout side's batch source (stage 1, :mod:`rllm.rollouts`) and
trains it (stages 2-8, :mod:`rllm.trainer.train_step`) in one loop (:mod:`rllm.trainer.step_loop`),
for the synchronous and the asynchronous run alike; the policy version and its weights' way to
the rollouts belong to :class:`~rllm.rollouts.policy.PolicyVersions`. Beside it: the settings
read once (:mod:`~rllm.trainer.run_settings`), validation (:mod:`~rllm.trainer.validation`),
the config-named parts (:mod:`~rllm.trainer.components`), the run directory and resuming
(:mod:`~rllm.trainer.run_files`) and what a checkpoint is tied to (:mod:`~rllm.trainer.fingerprint`).
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from rllm.config.loading import load_config
from rllm.engine.weight_sync import weight_sync_for
from rllm.errors import ConfigError, TrainerError
from rllm.rollouts.episode_log import EpisodeLogger
from rllm.rollouts.policy import PolicyVersions
from rllm.rollouts.workflow_engine import WorkflowEngine
from rllm.trainer.async_training import AsyncSettings
from rllm.trainer.backend_protocol import BackendProtocol, TrainerState
from rllm.trainer.checkpoint import CheckpointManager
from rllm.trainer.components import (
    check_backend_fills,
    check_backend_sections,
    configured_executor,
    resolve_backend,
    resolve_grouping_hook,
)
from rllm.trainer.fingerprint import NUMBER_SETTINGS, run_fingerprint
from rllm.trainer.grouping import GroupingHook
from rllm.trainer.logging import METRICS_FILE, read_metrics
from rllm.trainer.long_lived import collector_for_training
from rllm.trainer.plot import draw_learning_curve
from rllm.trainer.rejection import RejectionSamplingState
from rllm.trainer.run_files import LEARNING_CURVE, RunFiles
from rllm.trainer.run_report import RunReport
from rllm.trainer.run_settings import RunSettings
from rllm.trainer.step_loop import Cadence, StepLoop, count_steps
from rllm.trainer.trackers import TrackerRun, Trackers
from rllm.trainer.train_step import TrainStep
from rllm.trainer.validation import Validation
from rllm.usercode import UserThreads
from rllm.workflows.workflow import Workflow

TRAINER_OPTIONS = ("executor", "progress", "learning_curve")
"""Keyword arguments accepted beyond the documented ones."""


class UnifiedTrainer:
    """Runs RL training against any backend: a class, or the name a plugin registered.

    ``backend_cls`` may be a :class:`BackendProtocol` subclass, a registered backend name, or
    None for ``rllm.backend``. A workflow class or dataset left out comes from the backend's
    built-in task.
    ``traj_grouping_hook`` (a callable or a registered name) replaces ``rllm.grouping_hook``;
    ``traj_group_adv_estimator_map`` extends ``rllm.algorithm.estimator_map`` (role ->
    estimator name, or an (estimator, loss) pair), exactly as the same entries in the config
    would. Extra keywords: ``executor`` (where workflows run, default in-process) and
    ``progress`` (False hides the progress bar).
    """

    def __init__(
        self,
        backend_cls: type[BackendProtocol] | str | None,
        config: DictConfig | Mapping[str, Any],
        workflow_class: type[Workflow] | None = None,
        train_dataset: Sequence[Any] | None = None,
        val_dataset: Sequence[Any] | None = None,
        workflow_args: dict[str, Any] | None = None,
        backend_args: dict[str, Any] | None = None,
        *,
        traj_grouping_hook: GroupingHook | str | None = None,
        traj_group_adv_estimator_map: Mapping[str, str | tuple[str, str]] | None = None,
        **kwargs: Any,
    ) -> None:
        unknown = sorted(set(kwargs) - set(TRAINER_OPTIONS))
        if unknown:
            raise ConfigError(
                f"UnifiedTrainer got unknown keyword argument(s) {unknown}; accepted extras: "
                f"{', '.join(TRAINER_OPTIONS)}."
            )
        self.config = load_config(config)  # programmatic configs get the checks `rllm train` applies
        if kwargs.get("executor") is not None and str(self.config.rllm.workflow.executor) != "local":
            raise ConfigError(
                f"UnifiedTrainer got executor= and rllm.workflow.executor={self.config.rllm.workflow.executor}; "
                "choose one (leave rllm.workflow.executor at local when passing an executor)."
            )
        self.rllm_config = self.config.rllm
        self.workflow_class = workflow_class
        self.workflow_args = dict(workflow_args or {})
        self.train_dataset = train_dataset
        self.val_dataset = val_dataset
        self.traj_grouping_hook = resolve_grouping_hook(traj_grouping_hook, self.config)
        self.traj_group_adv_estimator_map = dict(traj_group_adv_estimator_map or {})
        self.progress = bool(kwargs.get("progress", True))
        self.draws_curve = bool(kwargs.get("learning_curve", False))
        self.learning_curve: Path | None = None
        """The learning curve drawn at the end of the run (``learning_curve=True``, matplotlib installed)."""
        self.report = RunReport()
        """This process's steps left untrained and rollouts timed out: said each step and at the end."""

        settings = RunSettings.from_config(self.config, self.traj_group_adv_estimator_map)
        self.algorithm_config = settings.algorithm  # the run's one AlgorithmConfig, handed to every part below
        self.cf_config, self.rs_config, self.ds_config = settings.cf, settings.rs, settings.ds
        self.val_pass_at_k = settings.val_pass_at_k
        self.async_settings = AsyncSettings.from_config(self.config)
        """``rllm.async_training``: sample the next batches while the policy updates (docs/async.md)."""
        backend_type = resolve_backend(backend_cls, self.config)
        check_backend_fills(backend_type, self.algorithm_config)
        if not isinstance(backend_cls, type):  # a backend by name: another's section is set for nothing
            check_backend_sections(self.config, backend_cls or str(self.config.rllm.backend))
        if backend_args and {"config", "algorithm"} & set(backend_args):
            raise ConfigError(
                "UnifiedTrainer backend_args may not hold 'config' or 'algorithm': the trainer passes the run's own."
            )
        self.backend: BackendProtocol = backend_type(
            config=self.config, algorithm=self.algorithm_config, **(backend_args or {})
        )
        self.backend.validate_config()
        self.process_group = self.backend.process_group
        """This process's place in a data-parallel run (None: one process); only rank 0 writes the run directory."""
        self._setup_task()

        trainer_cfg = self.rllm_config.trainer
        self.output_dir = Path(str(trainer_cfg.output_dir))
        self.checkpoints = CheckpointManager(
            self.output_dir / "checkpoints",
            run_fingerprint(self.config, self.algorithm_config, self.ds_config),
            keep=int(trainer_cfg.max_checkpoints),
        )
        episode_logging = self.rllm_config.episode_logging
        self.episode_logger = (
            EpisodeLogger(Path(str(episode_logging.episode_log_dir)))
            if episode_logging.log_episodes and self.writes
            else None
        )
        run = TrackerRun(
            name="",
            output_dir=self.output_dir,
            project=str(trainer_cfg.project_name),
            experiment=str(trainer_cfg.experiment_name),
            config=OmegaConf.to_container(self.config, resolve=True),  # type: ignore[arg-type]
            progress=self.progress,
        )
        deadline = trainer_cfg.tracker_timeout
        trackers = Trackers(trainer_cfg.logger, run, None if deadline is None else float(deadline))  # every rank checks
        self.logger = trackers if self.writes else Trackers([], run)
        self.run_files = RunFiles(self.output_dir, self.checkpoints, self.episode_logger, self.logger.outputs())
        self.run_dir = self.run_files.run_dir
        rollout_engine = self.backend.init_rollout_engine(
            cf_config=self.cf_config,
            rs_config=self.rs_config,
            algorithm_config=self.algorithm_config,
        )
        if list(self.rllm_config.rollout.openai.base_url) and not getattr(rollout_engine, "base_urls", None):
            raise ConfigError(
                f"rllm.rollout.openai.base_url is set, but backend {self.rllm_config.backend!r} samples from "
                f"{type(rollout_engine).__name__}, not from those servers; use rllm.backend=transformers, or leave "
                "base_url empty."
            )
        weights = self.backend.rollout_weights
        self.async_settings.check(
            f"{str(self.rllm_config.backend)!r} ({type(self.backend).__name__})",
            weights,
            self.algorithm_config,
            self.process_group,
            self.ds_config.enabled,
            self.rs_config.mode,
        )
        servers = [str(url) for url in self.rllm_config.rollout.openai.base_url]
        self.policy = PolicyVersions(
            rollout_engine,
            weights,
            asynchronous=self.async_settings.enabled,
            lead=self.async_settings.lead,
            servers=weight_sync_for(self.config, servers) if servers else None,
            group=self.process_group,
        )
        """The run's policy version, and the channel that takes its weights to where rollouts sample."""
        workflow = self.rllm_config.workflow
        self.agent_workflow_engine = WorkflowEngine(
            workflow_cls=self.workflow_class,  # type: ignore[arg-type]
            workflow_args=self.workflow_args,
            rollout_engine=rollout_engine,
            n_parallel_tasks=int(workflow.n_parallel_tasks),
            retry_limit=int(workflow.retry_limit),
            raise_on_error=bool(workflow.raise_on_error),
            timeout=None if workflow.timeout is None else float(workflow.timeout),
            executor=kwargs.get("executor") or configured_executor(workflow),
            episode_logger=self.episode_logger,
            failure_policy=str(workflow.failure_policy),
            seed=int(workflow.seed),
        )
        self.validation = Validation(
            self.backend,
            self.agent_workflow_engine,
            self.val_dataset,
            self.traj_grouping_hook,
            self.cf_config,
            self.algorithm_config,
            self.val_pass_at_k,
        )
        self.train_step = TrainStep(
            self.backend,
            self.agent_workflow_engine,
            self.policy,
            settings,
            self.traj_grouping_hook,
            self.train_dataset,
            self.report,
            self.async_settings.staleness if self.async_settings.enabled else 0,
        )

    @property
    def writes(self) -> bool:
        """Whether this process writes the run directory: the only process, or rank 0 of a data-parallel run."""
        return self.process_group is None or self.process_group.writes

    # -- setup ----------------------------------------------------------------------------
    def _setup_task(self) -> None:
        """Fill what the caller left out (workflow, datasets) from the backend's built-in task."""
        if self.workflow_class is not None and self.train_dataset is not None and self.val_dataset is not None:
            return
        setup = self.backend.builtin_task()
        if setup is None:
            if self.workflow_class is None:
                raise ConfigError(
                    f"Backend {type(self.backend).__name__} has no built-in task; pass workflow_class and "
                    "datasets to UnifiedTrainer."
                )
            return
        if self.workflow_class is None:
            self.workflow_class = setup.workflow_class
            self.workflow_args = {**setup.workflow_args, **self.workflow_args}
        if self.train_dataset is None:
            self.train_dataset = setup.train_dataset
        if self.val_dataset is None:
            self.val_dataset = setup.val_dataset

    # -- entry points ------------------------------------------------------------------------
    def fit(self) -> None:
        """Train to the end (sync). Inside a running event loop it trains on a separate thread."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            in_event_loop = False
        else:
            in_event_loop = True
        if not in_event_loop:
            asyncio.run(self._fit_on_own_loop())
            return
        failure: list[BaseException] = []

        def target() -> None:
            try:
                asyncio.run(self._fit_on_own_loop())
            except BaseException as exc:
                failure.append(exc)

        thread = threading.Thread(target=target, name="rllm-trainer")
        thread.start()
        thread.join()
        if failure:
            raise failure[0]

    async def _fit_on_own_loop(self) -> None:
        """:meth:`fit_async` on a loop :meth:`fit` made, whose default executor (``asyncio.to_thread``, a workflow's
        ``run_in_executor``) never joins a call a deadline abandoned, so such a call cannot keep the process alive."""
        asyncio.get_running_loop().set_default_executor(UserThreads(thread_name_prefix="rllm-workflow"))
        await self.fit_async()

    async def fit_async(self) -> None:
        """Train to the end: resume if a checkpoint exists, validate, run the steps, validate again.

        The run directory is locked for the duration (a second run into it fails with
        :class:`RunDirLockedError`), and a directory holding files rllm did not write is refused.
        """
        if self.writes:
            self.run_files.acquire()
        try:
            if self.writes:
                self.run_files.start(self.config)
            step = await self._fit_locked()
            if self.draws_curve and self.writes:
                self.learning_curve = draw_learning_curve(self.output_dir, self.logger, step)
        finally:
            self.logger.finish()
            if self.writes:
                self.run_files.release()

    async def _fit_locked(self) -> int:
        """The run; returns the step it ended at."""
        await self.agent_workflow_engine.initialize_pool()
        state = TrainerState(rs_state=RejectionSamplingState())
        resumed = self._resume(state)
        state.total_steps = self._total_steps(state)
        self.logger.start(
            state.total_steps,
            OmegaConf.to_container(self.config, resolve=True),  # type: ignore[arg-type]
            resumed_at=state.global_step if resumed else None,
            kept=read_metrics(self.output_dir / METRICS_FILE) if resumed else (),
        )
        await self.backend.on_train_start(state)
        await asyncio.to_thread(self.policy.start, state)
        trainer_cfg = self.rllm_config.trainer
        with collector_for_training():
            if trainer_cfg.val_only:
                await self._validate_async(state)
                return state.global_step
            if trainer_cfg.val_before_train and not resumed:
                await self._validate_async(state)
            if state.global_step >= state.total_steps:
                if self.writes:
                    print(
                        f"rllm: training already complete ({state.global_step} steps) in {str(self.output_dir)!r}; "
                        "nothing to do. To run it again from step 0 add rllm.trainer.resume_mode=disable (it deletes "
                        "what rllm wrote there) or give another rllm.trainer.experiment_name; to train longer raise "
                        "rllm.trainer.total_batches or total_epochs.",
                        file=sys.stderr,
                    )
            else:
                await self._steps().run(state)
        await self.backend.on_train_end(state)
        self.report.finish(bool(trainer_cfg.require_update))
        return state.global_step

    def _resume(self, state: TrainerState) -> bool:
        """Resume from the newest usable checkpoint; in a data-parallel run rank 0 first (it tidies the run
        directory), then the others read the same checkpoint, and every process must stand at the same step."""
        mode, group = str(self.rllm_config.trainer.resume_mode), self.process_group
        if group is None:
            return self.run_files.resume(state, self.backend, mode)
        resumed = self.run_files.resume(state, self.backend, mode) if group.writes else False
        group.barrier()
        if not group.writes:
            resumed = self.run_files.resume(state, self.backend, mode, tidy=False)
        steps = group.gather(state.global_step)
        if len(set(steps)) > 1:
            raise TrainerError(
                f"The processes of this run resumed at different steps ({steps}, by rank): their run directories "
                f"differ; give every rank the same rllm.trainer.output_dir on a shared file system."
            )
        return resumed

    def _save(self, state: TrainerState) -> None:
        """One checkpoint of this step: written by rank 0 alone; the others wait until it is in place."""
        self.backend.prepare_checkpoint()  # every rank: a sharded backend gathers what rank 0 writes
        if self.writes:
            self.checkpoints.save(state, self.backend)
        if self.process_group is not None:
            self.process_group.barrier()

    def _total_steps(self, state: TrainerState) -> int:
        trainer_cfg = self.rllm_config.trainer
        loader = self.backend.get_dataloader(self.train_dataset, state)
        return count_steps(loader, int(trainer_cfg.total_batches or -1), int(trainer_cfg.total_epochs), self.writes)

    def _steps(self) -> StepLoop:
        trainer_cfg = self.rllm_config.trainer
        cadence = Cadence(int(trainer_cfg.total_epochs), int(trainer_cfg.test_freq), int(trainer_cfg.save_freq))
        return StepLoop(
            self.backend,
            self.agent_workflow_engine,
            self.policy,
            self.train_step,
            self.validation,
            self.logger,
            self.report,
            self._save,
            self.train_dataset,
            cadence,
            overlapped=self.async_settings.enabled,
        )

    async def _validate_async(self, state: TrainerState) -> dict[str, float]:
        return await self.validation.run(state, self.logger)

    def shutdown(self) -> None:
        """Stop the workflow executor and the backend, and close the metric files."""
        self.agent_workflow_engine.shutdown()
        self.backend.shutdown()
        self.logger.finish()


__all__ = ["LEARNING_CURVE", "NUMBER_SETTINGS", "TRAINER_OPTIONS", "TrainerState", "UnifiedTrainer"]
