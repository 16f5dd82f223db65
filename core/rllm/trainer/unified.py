"""The backend-agnostic RL loop: episodes -> groups -> filtering -> advantages -> policy update.

Eight stages per training batch: (1) the backend generates episodes through the workflow
engine, (2) the grouping hook turns them into trajectory groups, (3) rejection sampling and
filtering, (4) the backend converts groups to its batch, (5) processes it (log-probs, ...),
(6) advantages are computed with rllm's estimators, (7) the backend updates the policy (and
its ``on_policy_updated`` hook sends the weights to where rollouts are sampled), (8) metrics are
logged. Validation, checkpoints and resume wrap around that loop.

This module is the orchestration; the parts it drives live beside it: the settings read once
(:mod:`rllm.trainer.run_settings`), the validation pass (:mod:`rllm.trainer.validation`), the
config-named parts (:mod:`rllm.trainer.components`), the run directory's files and resuming
(:mod:`rllm.trainer.run_files`), the settings a checkpoint is tied to
(:mod:`rllm.trainer.fingerprint`), dynamic sampling on a batch (:mod:`rllm.trainer.refill`)
and the step's timings and episode metrics (:mod:`rllm.trainer.step_metrics`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import sys
import threading
import time
import warnings
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from rllm.config.loading import load_config
from rllm.errors import ConfigError, RLLMWarning, TrainerError
from rllm.estimators.collect import collect_advantages
from rllm.trainer.async_training import (
    AheadSampler,
    AsyncSettings,
    SampledBatch,
    UpdateThread,
    check_batch_version,
    check_weight_versions,
    lag_metrics,
    stamp_weight_version,
)
from rllm.trainer.backend_protocol import BackendProtocol, TrainerState
from rllm.trainer.checkpoint import CheckpointManager
from rllm.trainer.components import (
    check_backend_fills,
    check_backend_sections,
    configured_executor,
    resolve_backend,
    resolve_grouping_hook,
)
from rllm.trainer.engine import EngineStats, WorkflowEngine
from rllm.trainer.fingerprint import NUMBER_SETTINGS, run_fingerprint
from rllm.trainer.grouping import (
    GroupingHook,
    check_estimator_roles,
    transform_episodes_to_trajectory_groups,
)
from rllm.trainer.logging import METRICS_FILE, EpisodeLogger, read_metrics
from rllm.trainer.long_lived import long_lived_objects_frozen
from rllm.trainer.refill import apply_dynamic_sampling
from rllm.trainer.rejection import (
    RejectionSamplingState,
    apply_rejection_sampling_and_filtering,
)
from rllm.trainer.run_files import LEARNING_CURVE, RunFiles
from rllm.trainer.run_report import FILTERED, RunReport
from rllm.trainer.run_settings import RunSettings
from rllm.trainer.step_metrics import episode_metrics, stage_timer, staleness_metrics
from rllm.trainer.trackers import TrackerRun, Trackers
from rllm.trainer.validation import Validation
from rllm.types import Episode, TrajectoryGroup
from rllm.usercode import UserThreads
from rllm.workflows.workflow import Workflow

TRAINER_OPTIONS = ("executor", "progress", "learning_curve")
"""Keyword arguments accepted beyond the documented ones."""


def _finite_floats(groups: Sequence[TrajectoryGroup]) -> bool:
    """Whether every reward of ``groups`` is a finite float, which the reward check of stage 6 accepts: only a batch
    with another reward needs the check run before the filters (it costs about what the estimator does)."""
    rewards = [trajectory.reward for group in groups for trajectory in group.trajectories]
    return all(type(reward) is float for reward in rewards) and math.isfinite(sum(rewards))


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
        self._unused_roles_warned: set[str] = set()
        self.report = RunReport()
        """This process's steps left untrained and rollouts timed out: said each step and at the end."""

        settings = RunSettings.from_config(self.config, self.traj_group_adv_estimator_map)
        self.algorithm_config = settings.algorithm  # the run's one AlgorithmConfig, handed to every part below
        self.cf_config, self.rs_config, self.ds_config = settings.cf, settings.rs, settings.ds
        self.val_pass_at_k = settings.val_pass_at_k
        self.async_settings = AsyncSettings.from_config(self.config)
        """``rllm.async_training``: sample the next batches while the policy updates (docs/async.md)."""
        self._versions: dict[int, int] = {}
        """Asynchronous training: the policy version after each step this process trained (what steps ahead sample)."""
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
        self.async_settings.check(
            self.backend, self.algorithm_config, self.process_group, self.ds_config.enabled, self.rs_config.mode
        )
        self._setup_task()

        trainer_cfg = self.rllm_config.trainer
        self.output_dir = Path(str(trainer_cfg.output_dir))
        self.checkpoints = CheckpointManager(
            self.output_dir / "checkpoints",
            run_fingerprint(self.config, self.algorithm_config, self.ds_config),
            keep=int(trainer_cfg.max_checkpoints),
            asynchronous=self.async_settings.enabled,
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
        if self.async_settings.enabled:
            check_weight_versions(rollout_engine)
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
                self._draw_learning_curve(step)
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
        trainer_cfg = self.rllm_config.trainer
        with long_lived_objects_frozen():
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
                await self._fit_async(state)
        await self.backend.on_train_end(state)
        self.report.finish(bool(trainer_cfg.require_update))
        return state.global_step

    def _draw_learning_curve(self, step: int) -> None:
        """``learning_curve.png`` from metrics.jsonl (when the jsonl tracker wrote it), given to every tracker."""
        from rllm.trainer.plot import PlotUnavailableError, plot_runs

        if not read_metrics(self.output_dir / METRICS_FILE):
            return
        try:
            self.learning_curve = plot_runs([self.output_dir], self.output_dir / LEARNING_CURVE)
        except PlotUnavailableError as exc:
            print(f"rllm: no learning curve: {exc}", file=sys.stderr)
            return
        self.logger.log_image("learning_curve", self.learning_curve, step)

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
        total_batches = int(trainer_cfg.total_batches or -1)
        loader = self.backend.get_dataloader(self.train_dataset, state)
        try:
            per_epoch = len(loader)  # type: ignore[arg-type]
        except TypeError:
            if total_batches <= 0:
                raise TrainerError(
                    "The training dataloader has no length; set rllm.trainer.total_batches to bound the run."
                ) from None
            return total_batches
        by_epochs = per_epoch * int(trainer_cfg.total_epochs)
        if total_batches > by_epochs and self.writes:
            warnings.warn(
                f"rllm.trainer.total_batches={total_batches} is more than the {by_epochs} steps that "
                f"rllm.trainer.total_epochs={int(trainer_cfg.total_epochs)} allows ({per_epoch} batches an epoch): "
                "the run stops there; raise rllm.trainer.total_epochs to train longer.",
                RLLMWarning,
                stacklevel=2,
            )
        return min(total_batches, by_epochs) if total_batches > 0 else by_epochs

    async def _fit_async(self, state: TrainerState) -> None:
        if self.async_settings.enabled:
            await self._fit_overlapped(state)
            return
        trainer_cfg = self.rllm_config.trainer
        test_freq, save_freq = int(trainer_cfg.test_freq), int(trainer_cfg.save_freq)
        validated_at = saved_at = -1
        start_epoch, skip = state.epoch, state.batches_done
        for epoch in range(start_epoch, int(trainer_cfg.total_epochs)):
            if state.global_step >= state.total_steps:
                break
            state.epoch = epoch
            state.batches_done = skip if epoch == start_epoch else 0
            await self.backend.on_epoch_start(state)
            for index, batch in enumerate(self.backend.get_dataloader(self.train_dataset, state)):
                if index < state.batches_done:
                    continue
                if state.global_step >= state.total_steps:
                    break
                state.reset_batch()
                state.global_step += 1
                await self.backend.on_batch_start(state)
                with stage_timer("step", state.timing_dict):
                    await self._train_batch_async(batch, state)
                engine = self.agent_workflow_engine
                state.metrics.update(engine.stats.as_metrics())  # every round of the step
                self.report.step_done(state.global_step, engine.stats, engine.timeout)
                state.batches_done = index + 1
                await self.backend.on_batch_end(state)
                timings = {f"time/{k}": v for k, v in state.timing_dict.items()}
                self.logger.log({**state.metrics, **timings}, step=state.global_step, epoch=epoch)
                if test_freq > 0 and state.global_step % test_freq == 0:
                    await self._validate_async(state)
                    validated_at = state.global_step
                if save_freq > 0 and state.global_step % save_freq == 0:
                    self._save(state)
                    saved_at = state.global_step
            await self.backend.on_epoch_end(state)
        if test_freq > 0 and validated_at != state.global_step:
            await self._validate_async(state)
        if save_freq > 0 and saved_at != state.global_step:
            self._save(state)

    async def _fit_overlapped(self, state: TrainerState) -> None:
        """The run of :meth:`_fit_async` with the batches of the steps ahead sampled while each step trains.

        The producer (:class:`AheadSampler`) samples in the order the synchronous loop would, each
        batch seeded by the step it is for, so with ``staleness_threshold=0`` the run is the
        synchronous one; checkpoints keep the batches sampled and not yet trained.
        """
        trainer_cfg, settings = self.rllm_config.trainer, self.async_settings
        test_freq, save_freq = int(trainer_cfg.test_freq), int(trainer_cfg.save_freq)
        validated_at = saved_at = -1
        pending = [SampledBatch.from_json(data) for data in state.pending]
        self.backend.publish_weights(state.policy_version)
        first, self._versions = state.global_step, {state.global_step: state.policy_version}
        updates = UpdateThread()
        sampler = AheadSampler(
            self._positions(state, pending),
            partial(self._sample_ahead, first=first),
            trained=state.global_step,
            last_step=state.total_steps,
            lead=settings.lead,
            pending=pending,
        )
        sampler.start()
        epoch_open = False
        try:
            while state.global_step < state.total_steps:
                with stage_timer("wait_rollouts", waited := {}):
                    sampled, ahead = await sampler.take()
                if sampled is None:
                    break
                if not epoch_open or sampled.epoch != state.epoch:
                    if epoch_open:
                        await self.backend.on_epoch_end(state)
                    state.epoch, epoch_open = sampled.epoch, True
                    await self.backend.on_epoch_start(state)
                state.reset_batch()
                state.global_step += 1
                state.timing_dict.update(waited)
                await self.backend.on_batch_start(state)
                with stage_timer("step", state.timing_dict):
                    state.episodes = sampled.episodes
                    state.timing_dict["generate"] = sampled.seconds
                    state.metrics.update(lag_metrics(sampled.episodes, state.policy_version, settings.staleness))
                    state.metrics["async/batches_ahead"] = float(ahead)
                    await self._train_episodes(state, sampled.stats, state.policy_version, updates)
                self._versions[state.global_step] = state.policy_version
                await sampler.step_trained()
                state.metrics.update(sampled.stats.as_metrics())
                self.report.step_done(state.global_step, sampled.stats, self.agent_workflow_engine.timeout)
                state.batches_done = sampled.index + 1
                await self.backend.on_batch_end(state)
                timings = {f"time/{k}": v for k, v in state.timing_dict.items()}
                self.logger.log({**state.metrics, **timings}, step=state.global_step, epoch=state.epoch)  # type: ignore[union-attr]
                if test_freq > 0 and state.global_step % test_freq == 0:
                    async with sampler.paused():
                        await self._validate_newest(state, sampler, first)
                    validated_at = state.global_step
                if save_freq > 0 and state.global_step % save_freq == 0:
                    state.pending = [batch.to_json() for batch in sampler.pending()]
                    self._save(state)
                    saved_at = state.global_step
            if epoch_open:
                await self.backend.on_epoch_end(state)
            async with sampler.paused():
                if test_freq > 0 and validated_at != state.global_step:
                    await self._validate_newest(state, sampler, first)
                if save_freq > 0 and saved_at != state.global_step:
                    state.pending = [batch.to_json() for batch in sampler.pending()]
                    self._save(state)
        finally:
            await sampler.stop()
            updates.close()

    def _positions(self, state: TrainerState, pending: Sequence[SampledBatch]) -> Any:
        """Every ``(epoch, index, batch)`` of the run in training order, from the first not yet sampled."""
        start = (pending[-1].epoch, pending[-1].index + 1) if pending else (state.epoch, state.batches_done)
        for epoch in range(start[0], int(self.rllm_config.trainer.total_epochs)):
            view = TrainerState(epoch=epoch, global_step=state.global_step, total_steps=state.total_steps)
            for index, batch in enumerate(self.backend.get_dataloader(self.train_dataset, view)):
                if (epoch, index) >= start:
                    yield epoch, index, batch

    async def _sample_ahead(self, epoch: int, index: int, batch: Any, step: int, first: int) -> SampledBatch:
        """Stage 1 for a step ahead, seeded by its step as in the synchronous run, with the weights trained up to
        ``lead`` steps before it (always those, however fast the update ran: a run is reproducible)."""
        version = self._versions[max(first, step - 1 - self.async_settings.lead)]
        self._refresh_rollout_weights(version, version)
        engine = self.agent_workflow_engine
        engine.set_training_step(step, mode="train", epoch=epoch)
        started = time.perf_counter()
        episodes = await self.backend.generate_episodes(batch, agent_workflow_engine=engine)
        stamp_weight_version(episodes, version)
        check_batch_version(episodes, version)
        return SampledBatch(
            epoch, index, step, version, episodes, dataclasses.replace(engine.stats), time.perf_counter() - started
        )

    def _refresh_rollout_weights(self, version: int, oldest: int) -> None:
        """The rollout engine on the weights of ``version``; its ``weight_version`` must say so."""
        self.backend.refresh_rollout_weights(version, oldest)
        reported = getattr(self.agent_workflow_engine.rollout_engine, "weight_version", None)
        if reported != version:
            kind = type(self.agent_workflow_engine.rollout_engine)
            raise TrainerError(
                f"Backend {type(self.backend).__name__} refreshed the rollout weights to version {version}, but its "
                f"rollout engine {kind.__qualname__} reports weight_version {reported!r}: the engine cannot report "
                "weight versions, so stale samples cannot be told apart; set rllm.async_training.enable=false."
            )

    async def _validate_newest(self, state: TrainerState, sampler: AheadSampler, first: int) -> None:
        """Validation of the policy trained so far (no batch samples meanwhile; the next keeps its version)."""
        upcoming = min(state.global_step, max(first, sampler.next_step - 1 - self.async_settings.lead))
        self._refresh_rollout_weights(self._versions[state.global_step], self._versions[upcoming])
        await self._validate_async(state)

    async def _train_batch_async(self, batch: Any, state: TrainerState) -> None:
        """Stages 1-8 for one batch; an empty stage ends the step early without an update."""
        engine = self.agent_workflow_engine
        engine.set_training_step(state.global_step, mode="train", epoch=state.epoch)
        with stage_timer("generate", state.timing_dict):  # stage 1
            version = getattr(engine.rollout_engine, "weight_version", None)
            state.episodes = await self.backend.generate_episodes(batch, agent_workflow_engine=engine)
            stamp_weight_version(state.episodes, version)
        await self._train_episodes(state, engine.stats, getattr(engine.rollout_engine, "weight_version", None))

    async def _train_episodes(
        self, state: TrainerState, stats: EngineStats, trained_version: int | None, updates: UpdateThread | None = None
    ) -> None:
        """Stages 2-8 on ``state.episodes`` for the policy of ``trained_version``; stages 4-7 on ``updates``' thread
        when given (asynchronous training)."""
        timings = state.timing_dict
        state.metrics.update(episode_metrics(state.episodes))
        state.metrics.update(staleness_metrics(state.episodes, trained_version))
        if not state.has_episodes:
            state.metrics["batch/updated"] = 0.0
            self.report.no_episodes(state.global_step, stats)
            return
        with stage_timer("group", timings):  # stages 2 and 3
            groups, transform_metrics = self._grouped(state.episodes)
            self._warn_unused_roles(groups)
            groups, episodes, rs_metrics = apply_rejection_sampling_and_filtering(
                state.episodes, groups, self.rs_config, state.rs_state
            )
        state.metrics.update(transform_metrics)
        state.metrics.update(rs_metrics)
        with stage_timer("dynamic_sampling", timings):
            groups, episodes = await apply_dynamic_sampling(
                groups, episodes, state, self.ds_config, self.train_dataset, partial(self._generate_round, state=state)
            )
        state.trajectory_groups, state.episodes = groups, episodes
        state.metrics["batch/updated"] = float(state.has_trajectory_groups)
        if not state.has_trajectory_groups:
            if state.rs_state.groups:  # episode-mode rejection sampling holds them back, as configured
                return
            self.report.untrained_step(state.global_step, FILTERED)
            return
        if updates is None:
            await self._update(state)
        else:
            await updates.run(self._update(state, publish=True))
        state.policy_version += 1

    async def _update(self, state: TrainerState, publish: bool = False) -> None:
        """Stages 4-7; with ``publish`` the new weights are then published as the next policy version."""
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
            await self.backend.compute_advantages(state, self.algorithm_config)
        with stage_timer("update", timings):  # stage 7
            await self.backend.update_policy(state)
        with stage_timer("weight_sync", timings):
            await self.backend.on_policy_updated(state)
        if publish:
            self.backend.publish_weights(state.policy_version + 1)

    def _grouped(self, episodes: Sequence[Episode]) -> tuple[list[TrajectoryGroup], dict[str, float]]:
        """Stage 2, then the reward check of ``nonfinite_rewards=error`` before any filter can drop a group unseen.

        Rejection and dynamic sampling would otherwise discard a group with a NaN reward (as
        uniform, or too small) and the run would train on without the RewardError naming it.
        """
        groups, metrics = transform_episodes_to_trajectory_groups(episodes, self.traj_grouping_hook, self.cf_config)
        if self.algorithm_config.nonfinite_rewards == "error" and not _finite_floats(groups):
            collect_advantages(groups, self.algorithm_config, write_steps=False, collect_advantage=False)
        return groups, metrics

    async def _generate_round(
        self, tasks: list[Any], state: TrainerState
    ) -> tuple[list[TrajectoryGroup], list[Episode]]:
        """Stages 1-3 for the tasks of a dynamic-sampling refill round (its grouping metrics are not logged)."""
        fresh = await self.backend.generate_episodes(tasks, agent_workflow_engine=self.agent_workflow_engine)
        more, _ = self._grouped(fresh)
        more, fresh, _ = apply_rejection_sampling_and_filtering(fresh, more, self.rs_config, state.rs_state)
        return more, fresh

    def _warn_unused_roles(self, groups: Sequence[Any]) -> None:
        for role in check_estimator_roles(groups, self.algorithm_config.estimator_map):
            if role not in self._unused_roles_warned:
                self._unused_roles_warned.add(role)
                roles = sorted({g.group_role for g in groups})
                warnings.warn(
                    f"rllm.algorithm.estimator_map names role {role!r}, but this batch's groups have roles "
                    f"{roles}; check the spelling (its estimator is not used).",
                    RLLMWarning,
                    stacklevel=3,
                )

    async def _validate_async(self, state: TrainerState) -> dict[str, float]:
        return await self.validation.run(state, self.logger)

    def shutdown(self) -> None:
        """Stop the workflow executor and the backend, and close the metric files."""
        self.agent_workflow_engine.shutdown()
        self.backend.shutdown()
        self.logger.finish()


__all__ = ["LEARNING_CURVE", "NUMBER_SETTINGS", "TRAINER_OPTIONS", "TrainerState", "UnifiedTrainer"]
