"""The transformers backend: RL on a causal LM with rllm's estimators (see docs/transformers.md).

Stages: workflows sample through :class:`TransformersEngine` (batched across concurrent
rollouts); stage 4 packs every step into one right-padded row; stage 5 recomputes the old
policy's log-probs (or takes the rollout's, with ``bypass_mode``) and the reference policy's,
and with ``use_kl_in_reward`` subtracts the KL penalty from the rewards (:mod:`rllm_transformers.rewards`);
stage 7 runs ``ppo_epochs`` passes over shuffled mini-batches, each accumulated over
micro-batches, with gradient-norm clipping and AdamW. Checkpoints are safetensors and JSON;
the model part is a ``save_pretrained`` directory, so any checkpoint loads with
``AutoModelForCausalLM.from_pretrained`` (with LoRA, :mod:`rllm_transformers.lora`, it holds the adapter alone).
"""

from __future__ import annotations

import copy
import time
import warnings
from collections import defaultdict
from collections.abc import Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from rllm.config import unhonoured_keys
from rllm.engine import OpenAIEngine
from rllm.errors import ConfigError, RLLMWarning, TrainerError
from rllm.losses import KLInReward, LossSettings
from rllm.tasks import VOCAB, ArithmeticWorkflow, build_tasks
from rllm.toolkit import TOKEN_FIELDS
from rllm.trainer import (
    BackendProtocol,
    ProcessGroup,
    TaskLoader,
    TaskSetup,
    TrainerState,
    WorkflowEngine,
    scheduled_lr,
    task_loader,
)
from rllm.types import Episode
from rllm_transformers.plugin import missing_extra_error

try:  # the extra first: without it, selecting the backend is one line naming the extra, not an ImportError
    import torch

    from rllm_transformers.batch import RowBatch, pack_rows, response_tokens
    from rllm_transformers.checkpointing import Checkpointing
    from rllm_transformers.distributed import Distributed
    from rllm_transformers.distributed import start as start_distributed
    from rllm_transformers.engine import Sampling, TransformersEngine, UniformStream
    from rllm_transformers.lora import AdaptersOff, add_adapters, lora_settings, trainable
    from rllm_transformers.model import (
        checkpoint_activations,
        has_digit_ids,
        load_policy,
        set_training,
        token_limits,
        use_threads,
    )
    from rllm_transformers.rewards import check_estimators_see_the_penalty
    from rllm_transformers.rollout_weights import ModelWeights
    from rllm_transformers.scoring import BatchScoring
    from rllm_transformers.teacher import load_teacher
    from rllm_transformers.update import UpdateSchedule, UpdateSteps
    from rllm_transformers.update import within_budget as within_budget  # its import path before the update's module
except ImportError as exc:
    raise missing_extra_error(exc) from None

DEFAULT_LOSS = "vanilla"

_REFUSED = {"rllm.algorithm.router_replay": "its models are trained without router replay; set it to disabled"}
"""rLLM's keys this backend cannot honour when set (key: what to do). Every other key is honoured."""


class TransformersBackend(BatchScoring, UpdateSteps, Checkpointing, BackendProtocol):
    """``rllm.backend=transformers`` (the plugin registers this class's path, so it is imported when selected)."""

    batch_fields = frozenset(TOKEN_FIELDS)
    """Stage 5 puts every per-token field on the steps (``step.info``; the sampler's are ``step.logprobs``)."""

    @classmethod
    def serve(cls, config: DictConfig, *settings: Any) -> int:
        """``rllm serve``: the model the ``rllm.transformers`` keys name, over an OpenAI-compatible API; ``settings``
        are :func:`rllm_transformers.serve.serve`'s (host, port, name, reproducible)."""
        from rllm_transformers.serve import serve

        return serve(config, *settings)

    @classmethod
    def serve_tinker(cls, config: DictConfig, *settings: Any) -> int:
        """``rllm serve --tinker``: the same model behind the Tinker API, trained with full weights; ``settings`` are
        :func:`rllm_transformers.tinker_server.app.serve_tinker`'s (host, port, name, checkpoint dir, snapshots,
        reproducible)."""
        from rllm_transformers.tinker_server.app import serve_tinker

        return serve_tinker(config, *settings)

    def __init__(self, config: DictConfig, **kwargs: Any) -> None:
        super().__init__(config, **kwargs)
        self.options = config.rllm.transformers
        options = self.options
        self.schedule = UpdateSchedule.of(options)
        self.lora = lora_settings(config)
        """``rllm.transformers.lora.*``: None, or the adapters that train while the base model stays frozen."""
        self.distributed: Distributed | None = start_distributed(config)
        """Under torchrun with several ranks, this rank's process group (docs/scaling.md); else None."""
        served = bool(list(config.rllm.rollout.openai.base_url))
        self.host_copy = bool(self.distributed and self.distributed.sharded and served)
        """FSDP with rollouts from servers: no rank keeps the whole model on its device. ``self.model`` is rank 0's
        copy in host memory (what pushes and checkpoints write, gathered into after each update) and a shape
        without storage (the meta device) on the other ranks, from the start: the sharded copies are filled from
        rank 0's; stage 5 scores with the sharded copy."""
        place = self.distributed.unsharded_place if self.host_copy and self.distributed is not None else None
        self.policy = load_policy(options, place)
        self.adapted = None if self.lora is None else add_adapters(self.policy.model, self.lora)
        """With LoRA, the peft model around ``self.model`` (which holds its adapters): it saves and loads the adapter
        and turns the adapters off for the reference policy."""
        use_threads(options, self.policy.model, self.policy.device)
        self.model = self.policy.model
        self.tokenizer = self.policy.tokenizer
        self.device = self.policy.device
        self.precision = self.policy.precision
        if bool(options.gradient_checkpointing):
            checkpoint_activations(self.model)
        self.grad_scaler = self.precision.grad_scaler(self.device)
        """fp16-mixed: the loss scale (a step whose scaled gradient overflows is skipped and the scale lowered)."""
        seed = int(options.seed)
        self.trained: torch.nn.Module = self.model
        """What the update runs forward and backward: the model, the model under DDP, or under FSDP a sharded copy
        whose whole weights are gathered into ``self.model`` after each update, a tensor at a time (in-process
        rollouts and stage 5's old log-probs use those; the reference is sharded, :meth:`_frozen_reference`),
        except in the :attr:`host_copy` layout."""
        if self.distributed is not None:
            self.distributed.seed(seed)
            self.trained = self.distributed.wrap(self.model)
        self._gathered_optimizer: dict[str, Any] | None = None
        self._pending_optimizer: dict[str, Any] | None = None
        """Under FSDP: the optimizer state gathered for rank 0 to write, and a loaded one not yet sharded."""
        self.sample_rng = UniformStream(seed)
        self.update_rng = torch.Generator().manual_seed(seed + 1)
        self.optimizer = torch.optim.AdamW(
            trainable(self.trained),  # with LoRA the adapters only
            lr=float(options.lr),
            betas=(float(options.adam_beta1), float(options.adam_beta2)),
            weight_decay=float(options.weight_decay),
            # not the fused kernel (19 ms against 105 ms of a 790 ms step at vocabulary 151,936): it rounds
            # differently from the implementation FSDP's sharded parameters take, and the one-process, sharded and
            # asynchronous runs must give the same numbers. One process takes the multi-tensor one (torch's default
            # on CUDA; on the CPU the same per-tensor kernels, so the same numbers, at a third less of the step's
            # Python: 1.2 ms against 1.6 on the tiny model); the ranks keep torch's default for their layout.
            foreach=True if self.distributed is None else None,
        )
        # each role's loss from the registry, resolved and checked once per run; use_kl_loss adds the KL term
        self.default_settings = LossSettings.from_algorithm(self.algorithm, "", DEFAULT_LOSS)
        self.role_settings = {
            role: LossSettings.from_algorithm(self.algorithm, role, DEFAULT_LOSS) for role in self.algorithm.loss_fn_map
        }
        # KL in the reward: its controller's coefficient changes each step and is checkpointed
        self.kl_in_reward = KLInReward.from_algorithm(self.algorithm)
        self.token_fields = self._required_token_fields()
        """The per-token fields the run's estimators need, which stage 5 writes onto the steps."""
        self.entropy_bonus = any(s.entropy_coeff > 0 for s in [self.default_settings, *self.role_settings.values()])
        needed = "teacher_log_probs" in self.token_fields
        group = self.distributed
        shards = group if group is not None and group.sharded else None
        at = None if shards is None else shards.unsharded_place
        teacher = load_teacher(options, needed, self.algorithm.estimator, self.tokenizer, self.device, at)
        self.teacher = teacher if teacher is None or shards is None else shards.sharded_copy(teacher)
        """The frozen teacher whose log-probs stage 5 writes as ``teacher_log_probs`` (distillation); else None. Under
        FSDP a sharded copy filled from rank 0's host copy (no rank loads it whole on its device)."""
        self.reference: torch.nn.Module | AdaptersOff | None = None
        in_loss = any(s.kl_coef > 0 for s in [self.default_settings, *self.role_settings.values()])
        if in_loss or self.kl_in_reward is not None:
            self.reference = self._frozen_reference()
        self.engine: TransformersEngine | OpenAIEngine | None = None
        asynchronous = bool(config.rllm.async_training.enable)
        self.rollout_model: torch.nn.Module = (  # asynchronously rollouts sample a copy (or the servers' weights)
            copy.deepcopy(self.model).eval().requires_grad_(False) if asynchronous and not served else self.model
        )
        self._rollout_weights = ModelWeights(
            self.model,
            self.rollout_model,
            lambda: Path(str(self.config.rllm.trainer.output_dir)) / "weight_sync",
            self.distributed,
        )
        self.workflow_name = "the workflow"
        self.history_break_said = False
        """The workflow the last episodes came from, named by stage 4's errors about their token ids."""
        self.rollout_tokens, self.rollout_seconds = 0, 0.0
        """The step's response tokens and the wall-clock seconds its rollouts took: ``perf/rollout_tokens_per_s``."""

    def _frozen_reference(self) -> torch.nn.Module | AdaptersOff:
        """The frozen initial policy: with LoRA the base model, the adapters off (no copy); under FSDP a sharded
        copy (each rank holds 1/N of it, stage 5 runs its forward on every rank); else a whole copy."""
        if self.adapted is not None:  # where no rank keeps the whole model, the sharded copy with its adapters off
            return AdaptersOff(self.trained if self.host_copy else self.model)
        group = self.distributed
        frozen = copy.deepcopy(self.model) if group is None or not group.sharded else group.sharded_copy(self.model)
        return frozen.eval().requires_grad_(False)

    @property
    def process_group(self) -> ProcessGroup | None:
        return None if self.distributed is None else self.distributed.group

    def shutdown(self) -> None:
        if isinstance(self.engine, OpenAIEngine):
            self.engine.shutdown()
        if self.distributed is not None:
            self.distributed.close()

    @property
    def rollout_weights(self) -> ModelWeights:
        return self._rollout_weights

    @property
    def loss_description(self) -> str:
        roles = "".join(
            f", role {role}: {settings.describe()}" for role, settings in sorted(self.role_settings.items())
        )
        return self.default_settings.describe() + roles

    def validate_config(self) -> None:
        for key, value in unhonoured_keys(self.config, _REFUSED).items():
            raise ConfigError(f"{key}={value!r} is not supported by the transformers backend: {_REFUSED[key]}.")
        sampling = self.sampling()
        exact = sampling.temperature == 1.0 and sampling.top_p == 1.0 and sampling.top_k == 0
        correction = self.algorithm.rollout_correction
        if correction.bypass_mode and not exact:
            raise ConfigError(
                "rllm.algorithm.rollout_correction.bypass_mode=true takes the rollout's log-probs as the old policy, "
                "but rllm.transformers.temperature/top_p/top_k change the sampling distribution; sample at "
                "temperature 1 without top-k/top-p, or leave bypass_mode unset."
            )
        if self.schedule.mini_batches < 1 or self.schedule.micro_batches < 1:
            raise ConfigError("rllm.transformers.mini_batches and micro_batches must be at least 1.")
        check_estimators_see_the_penalty(self.algorithm)

    def sampling(self) -> Sampling:
        options = self.options
        return Sampling(float(options.temperature), float(options.top_p), int(options.top_k))

    def builtin_task(self) -> TaskSetup:
        tasks = build_tasks([str(name) for name in self.options.tasks])
        if not has_digit_ids(self.options):  # the tasks' token ids are the digit tokenizer's: re-encode the text
            tasks = [self._encoded(task) for task in tasks]
        return TaskSetup(workflow_class=ArithmeticWorkflow, train_dataset=tasks, val_dataset=tasks)

    def _encoded(self, task: dict[str, Any]) -> dict[str, Any]:
        text = "".join(VOCAB[token] for token in task["prompt"])
        answers = [self.tokenizer.convert_tokens_to_ids(str(answer)) for answer in task["answers"]]
        return {**task, "prompt": self.tokenizer.encode(text, add_special_tokens=False), "answers": answers}

    def init_rollout_engine(self, **kwargs: Any) -> TransformersEngine | OpenAIEngine:
        """The in-process engine, or with ``rllm.rollout.openai.base_url`` an :class:`OpenAIEngine` over those servers.

        Either way this backend does the update; the trainer's policy channel takes each version's weights to the
        servers through the run's weight sync (:attr:`rollout_weights` describes them).
        """
        options = self.options
        max_new_tokens, max_prompt_length = token_limits(options, self.model)
        servers = [str(url) for url in self.config.rllm.rollout.openai.base_url]
        if servers:
            sampling = self.sampling()
            params: dict[str, Any] = {"temperature": sampling.temperature}
            if sampling.top_p < 1.0:
                params["top_p"] = sampling.top_p
            if sampling.top_k > 0:
                params["top_k"] = sampling.top_k
            self.engine = OpenAIEngine.from_config(
                self.config,
                self.tokenizer,
                max_prompt_length=max_prompt_length,
                max_response_length=max_new_tokens,
                sampling_params=params,
                greedy_validation=bool(options.greedy_validation),
                seed=int(options.seed),
            )
            return self.engine
        self.engine = TransformersEngine(
            self.rollout_model,
            self.tokenizer,
            self.device,
            self.sample_rng,
            self.sampling(),
            max_new_tokens=max_new_tokens,
            max_prompt_length=max_prompt_length,
            greedy_validation=bool(options.greedy_validation),
        )
        return self.engine

    def get_dataloader(self, dataset: Sequence[Any] | None, trainer_state: TrainerState) -> TaskLoader:
        return task_loader(self.config, "transformers", dataset, trainer_state, int(self.options.seed))

    async def generate_episodes(
        self, batch: Sequence[Any], agent_workflow_engine: WorkflowEngine, is_validation: bool = False
    ) -> list[Episode]:
        self.workflow_name = f"Workflow {agent_workflow_engine.workflow_cls.__name__}"
        started = time.perf_counter()
        episodes = await super().generate_episodes(batch, agent_workflow_engine, is_validation)
        if not is_validation:  # this step's rollouts, wherever the executor ran them (several rounds: summed)
            self.rollout_tokens += response_tokens(episodes)
            self.rollout_seconds += time.perf_counter() - started
        return episodes

    # -- stages 4, 5 and 7 -------------------------------------------------------------------
    def transform_to_backend_batch(self, trainer_state: TrainerState) -> RowBatch:
        groups = trainer_state.trajectory_groups
        loss_of = {group.group_role: self._settings(group.group_role).name for group in groups}
        vocab = int(self.model.get_input_embeddings().num_embeddings)
        batch = pack_rows(groups, loss_of, int(self.tokenizer.pad_token_id), self.device, vocab, self.workflow_name)
        trainer_state.metrics["batch/steps_per_row"] = len(batch.steps) / batch.rows
        trainer_state.metrics["batch/history_breaks"] = float(len(batch.history_breaks))
        if batch.history_breaks and not self.history_break_said:
            self.history_break_said = True
            warnings.warn(
                f"{self.workflow_name}: {len(batch.history_breaks)} step(s) of step {trainer_state.global_step} were "
                f"not sampled from their trajectory's earlier turns as sampled (first: {batch.history_breaks[0]}); the "
                "chat template or the workflow rewrote the history (e.g. trimmed a reply or dropped its reasoning), "
                "so each such step trains alone on the prompt it was given. Keep earlier turns verbatim to train a "
                "conversation as one sequence; metric batch/history_breaks counts them per step.",
                RLLMWarning,
                stacklevel=2,
            )
        return batch

    async def update_policy(self, trainer_state: TrainerState) -> None:
        batch: RowBatch = trainer_state.backend_batch
        from_update = batch.old_logps is None and self._old_policy_is_the_updates()
        if from_update:  # filled by the forward pass below, before the loss reads them
            batch.old_logps = torch.zeros_like(batch.mask)
        if batch.old_logps is None:
            raise TrainerError("The policy update ran before stage 5 computed the old log-probs.")
        started = time.perf_counter()
        options = self.options
        advantages = batch.advantages()
        lr = scheduled_lr(float(options.lr), self.algorithm, trainer_state.global_step, trainer_state.total_steps)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        n = batch.rows
        sums: dict[str, list[float]] = defaultdict(list)
        role_names = sorted(set(batch.roles))
        role_of = torch.tensor([role_names.index(role) for role in batch.roles], device=self.device)
        losses = ", ".join(sorted({self._settings(role).name for role in role_names}))
        self._load_sharded()
        set_training(self.trained, True)
        group = self.distributed
        scale = 1.0 if group is None else float(group.world_size)  # DDP averages the ranks' gradients: undo it
        lengths = batch.attention.sum(1)
        for _epoch in range(self.schedule.ppo_epochs):
            order = torch.randperm(n, generator=self.update_rng).to(self.device)
            for mini in torch.tensor_split(order, min(self.schedule.mini_batches, n)):
                # the normalisation of loss_agg_mode is the whole mini-batch's, on every rank
                totals = batch.totals(mini)
                self.optimizer.zero_grad(set_to_none=True)
                mini_loss = 0.0
                pieces = self._micro_batches(mini, lengths)
                for index, rows in enumerate(pieces):
                    sync = group is None or index == len(pieces) - 1
                    # the forward runs collectives too (DDP's buffer broadcast, FSDP's gathers): a lost rank is one line
                    collectives = nullcontext() if group is None else group.collective("running the update")
                    with nullcontext() if group is None else group.no_sync(self.trained, sync), collectives:
                        if not len(rows):  # a rank without rows here still joins the gradient all-reduce
                            self._idle_backward(batch, mini[:1])
                            continue
                        logp, entropy = self._micro_scores(batch, rows)
                        if from_update:
                            batch.old_logps[rows] = logp.detach()
                        loss = self._micro_loss(
                            batch, rows, logp, entropy, advantages, role_of, role_names, totals, sums
                        )
                        self._backward(loss * scale, group)
                    mini_loss += float(loss.detach())
                    self._token_metrics(sums, batch.mask[rows], entropy.detach(), logp, batch.old_logps[rows])
                self._step_optimizer(mini_loss, losses, trainer_state.global_step, sums)
        if group is not None and group.sharded:  # the whole weights for rollouts and stage 5, or rank 0's host copy
            group.gather_into(self.trained, self.model)
        sums = self._all_ranks(sums)
        if from_update:
            trainer_state.metrics.update(self._rollout_gap(batch))
        tokens = float(batch.mask.sum())
        elapsed = time.perf_counter() - started
        metrics = {key: sum(values) / len(values) for key, values in sums.items() if values}
        metrics.update(
            {"actor/lr": lr, "actor/tokens": tokens, "perf/update_tokens_per_s": tokens / max(elapsed, 1e-9)}
        )
        if self.rollout_seconds > 0:
            metrics["perf/rollout_tokens_per_s"] = self.rollout_tokens / self.rollout_seconds
        self.rollout_tokens, self.rollout_seconds = 0, 0.0
        trainer_state.metrics.update(metrics)
