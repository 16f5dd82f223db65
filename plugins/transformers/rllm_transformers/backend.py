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

import asyncio
import copy
import math
import threading
import warnings
from collections import defaultdict
from collections.abc import Collection, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from rllm.config import unhonoured_keys
from rllm.engine import OpenAIEngine, PolicyUpdate, WeightSync, same_vocabulary, weight_sync_for
from rllm.errors import ConfigError, RLLMWarning, TrainerError
from rllm.losses import KLInReward, LossSettings, check_kl_coef, rejection_mask
from rllm.tasks import VOCAB, ArithmeticWorkflow, build_tasks
from rllm.toolkit import TOKEN_FIELDS, get_estimator
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
from rllm_transformers.plugin import TOKENIZERS, missing_extra_error

try:  # the extra first: without it, selecting the backend is one line naming the extra, not an ImportError
    import torch

    from rllm_transformers.batch import MiniBatchTotals, RowBatch, pack_rows, response_tokens
    from rllm_transformers.checkpoint import load_training_state, save_training_state
    from rllm_transformers.distributed import Distributed
    from rllm_transformers.distributed import start as start_distributed
    from rllm_transformers.engine import Sampling, TransformersEngine
    from rllm_transformers.logprobs import TokenScores, score_tokens
    from rllm_transformers.lora import AdaptersOff, add_adapters, load_adapter, lora_settings, merged_weights, trainable
    from rllm_transformers.model import TINY, default_threads, has_digit_ids, load_policy, set_training, token_limits
    from rllm_transformers.rewards import check_estimators_see_the_penalty, subtract_from_rewards
    from rllm_transformers.sync_weights import save_weights, weights_bytes
    from rllm_transformers.weights import load_checked
except ImportError as exc:
    raise missing_extra_error(exc) from None

DEFAULT_LOSS = "vanilla"

_REFUSED = {"rllm.algorithm.router_replay": "its models are trained without router replay; set it to disabled"}
"""rLLM's keys this backend cannot honour when set (key: what to do). Every other key is honoured."""


def _unfit(version: int, problem: str) -> TrainerError:
    return TrainerError(f"The published weights of policy version {version} do not fit the rollout model ({problem}).")


class TransformersBackend(BackendProtocol):
    """``rllm.backend=transformers`` (the plugin registers this class's path, so it is imported when selected)."""

    batch_fields = frozenset(TOKEN_FIELDS)
    """Stage 5 puts every per-token field on the steps (``step.info``; the sampler's are ``step.logprobs``)."""

    @classmethod
    def serve(cls, config: DictConfig, host: str, port: int, model_name: str | None = None) -> int:
        """``rllm serve``: the model the ``rllm.transformers`` keys name, over an OpenAI-compatible API."""
        from rllm_transformers.serve import serve

        return serve(config, host, port, model_name)

    @classmethod
    def serve_tinker(
        cls, config: DictConfig, host: str, port: int, model_name: str | None, checkpoint_dir: str | None
    ) -> int:
        """``rllm serve --tinker``: the same model behind the Tinker API, trained with full weights."""
        from rllm_transformers.tinker_server.app import serve_tinker

        return serve_tinker(config, host, port, model_name, checkpoint_dir)

    def __init__(self, config: DictConfig, **kwargs: Any) -> None:
        super().__init__(config, **kwargs)
        self.options = config.rllm.transformers
        options = self.options
        self.lora = lora_settings(config)
        """``rllm.transformers.lora.*``: None, or the adapters that train while the base model stays frozen."""
        self.distributed: Distributed | None = start_distributed(config)
        """Under torchrun with several ranks, this rank's process group (docs/scaling.md); else None."""
        if self.lora is not None and self.distributed is not None:
            self.distributed.close()
            raise ConfigError(
                "rllm.transformers.lora.rank > 0 under torchrun with several ranks is not supported yet; run one "
                "process, or set rllm.transformers.lora.rank=0."
            )
        self.policy = load_policy(options)
        self.adapted = None if self.lora is None else add_adapters(self.policy.model, self.lora)
        """With LoRA, the peft model around ``self.model`` (which holds its adapters): it saves and loads the adapter
        and turns the adapters off for the reference policy."""
        threads = int(options.num_threads) or default_threads(self.policy.model, self.policy.device)
        if threads > 0:
            torch.set_num_threads(threads)
        self.model = self.policy.model
        self.tokenizer = self.policy.tokenizer
        self.device = self.policy.device
        self.precision = self.policy.precision
        if bool(options.gradient_checkpointing):
            self._checkpoint_activations()
        self.grad_scaler = self.precision.grad_scaler(self.device)
        """fp16-mixed: the loss scale (a step whose scaled gradient overflows is skipped and the scale lowered)."""
        seed = int(options.seed)
        self.trained: torch.nn.Module = self.model
        """What the update runs forward and backward: the model, the model under DDP, or under FSDP a sharded copy
        whose whole weights are gathered into ``self.model`` after each update (rollouts and stage 5 use those)."""
        if self.distributed is not None:
            self.distributed.seed(seed)
            self.trained = self.distributed.wrap(self.model)
        self._gathered_optimizer: dict[str, Any] | None = None
        self._pending_optimizer: dict[str, Any] | None = None
        """Under FSDP: the optimizer state gathered for rank 0 to write, and a loaded one not yet sharded."""
        self.sample_rng = torch.Generator().manual_seed(seed)
        self.update_rng = torch.Generator().manual_seed(seed + 1)
        self.optimizer = torch.optim.AdamW(
            trainable(self.trained),  # with LoRA the adapters only
            lr=float(options.lr),
            betas=(float(options.adam_beta1), float(options.adam_beta2)),
            weight_decay=float(options.weight_decay),
            # torch's default implementation for every layout: the fused kernel (19 ms against 105 ms of a 790 ms
            # step at vocabulary 151,936) rounds differently from the one FSDP's sharded parameters take, and the
            # one-process, sharded and asynchronous runs must give the same numbers.
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
        self.teacher = self._teacher()
        """The frozen teacher whose log-probs stage 5 writes as ``teacher_log_probs`` (distillation); else None."""
        self.reference: torch.nn.Module | AdaptersOff | None = None
        in_loss = any(s.kl_coef > 0 for s in [self.default_settings, *self.role_settings.values()])
        if in_loss or self.kl_in_reward is not None:
            self.reference = (  # the frozen initial policy; with LoRA the base model, the adapters off
                copy.deepcopy(self.model).eval().requires_grad_(False)
                if self.adapted is None
                else AdaptersOff(self.adapted)
            )
        self.engine: TransformersEngine | OpenAIEngine | None = None
        self.weight_sync: WeightSync | None = None
        """With ``rllm.rollout.openai.base_url``: what takes each update's weights to the servers."""
        self.asynchronous = bool(config.rllm.async_training.enable)
        """``rllm.async_training``: rollouts sample from other weights than the update's (a copy, or the servers'),
        refreshed between batches."""
        served = bool(list(config.rllm.rollout.openai.base_url))
        self.rollout_model: torch.nn.Module = (
            copy.deepcopy(self.model).eval().requires_grad_(False) if self.asynchronous and not served else self.model
        )
        self._published: dict[int, dict[str, torch.Tensor]] = {}
        """Asynchronous training: the weights of each policy version a batch may still sample from."""
        self._publishing = threading.Lock()
        self._rollout_version: int | None = None
        """The version of the weights the rollouts sample (the rollout copy's, or the servers'); None: not yet set."""
        self.workflow_name = "the workflow"
        self.history_break_said = False
        """The workflow the last episodes came from, named by stage 4's errors about their token ids."""
        self.rollout_tokens, self.rollout_seconds = 0, 0.0
        """The step's response tokens and the wall-clock seconds its rollouts took: ``perf/rollout_tokens_per_s``."""

    # -- setup ------------------------------------------------------------------------------
    def _checkpoint_activations(self) -> None:
        """``rllm.transformers.gradient_checkpointing``: transformers' own, non-reentrant (it takes keyword arguments
        and leaves the inputs' ``requires_grad`` alone); it acts in training mode only, so sampling is unchanged."""
        model = self.model
        if not getattr(model, "supports_gradient_checkpointing", False):
            raise ConfigError(
                f"rllm.transformers.gradient_checkpointing=true, but {type(model).__name__} does not support it "
                "(supports_gradient_checkpointing is false); set it to false."
            )
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})

    def _teacher(self) -> torch.nn.Module | None:
        """``rllm.transformers.teacher`` loaded and frozen, when the run's estimators read its log-probs.

        Either without the other is refused: an estimator reading ``teacher_log_probs`` needs the
        key, and the key without such an estimator would load a model nothing uses.
        """
        name = self.options.teacher
        needed = "teacher_log_probs" in self.token_fields
        if name is None:
            if needed:
                raise ConfigError(
                    f"Estimator {self.algorithm.estimator!r} needs teacher_log_probs: set rllm.transformers.teacher "
                    "to a model with the student's tokenizer (a directory, a hub id, or tiny)."
                )
            return None
        if not needed:
            raise ConfigError(
                f"rllm.transformers.teacher={name!r} is set but no estimator of the run reads teacher_log_probs; "
                "use rllm.algorithm.adv_estimator=distill, or leave the key unset."
            )
        options = OmegaConf.merge(self.options, {"model": str(name), "seed": int(self.options.seed) + 1})
        if str(name) != TINY:
            options.tokenizer = TOKENIZERS[0]  # a model directory or hub id brings its own tokenizer
        teacher = load_policy(options)
        if not same_vocabulary(self.tokenizer, teacher.tokenizer):
            student = str(self.options.model)
            raise ConfigError(
                f"rllm.transformers.teacher={name!r} has another tokenizer ({len(teacher.tokenizer)} tokens, EOS "
                f"{teacher.tokenizer.eos_token!r}) than the student rllm.transformers.model={student!r} "
                f"({len(self.tokenizer)} tokens, EOS {self.tokenizer.eos_token!r}); distillation needs one vocabulary."
            )
        return teacher.model.to(self.device).eval().requires_grad_(False)

    @property
    def process_group(self) -> ProcessGroup | None:
        return None if self.distributed is None else self.distributed.group

    def shutdown(self) -> None:
        if isinstance(self.engine, OpenAIEngine):
            self.engine.shutdown()
        if self.distributed is not None:
            self.distributed.close()

    async def on_train_start(self, trainer_state: TrainerState) -> None:
        """With servers: send them this run's weights first, so the first step samples from the trained model.

        Asynchronous runs number them by the policy version (the steps' versions are those), synchronous ones by
        the step.
        """
        if isinstance(self.engine, OpenAIEngine):
            version = trainer_state.policy_version if self.asynchronous else trainer_state.global_step
            self.engine.weight_version = version
            await asyncio.to_thread(self._push, version, None)

    async def on_policy_updated(self, trainer_state: TrainerState) -> None:
        """With servers, synchronously: the new weights reach every one of them before the next step samples (a
        refusal stops). Asynchronous runs push in :meth:`refresh_rollout_weights`, between batches, instead: here
        the servers may be sampling the next batch."""
        if self.weight_sync is None or self.engine is None or self.asynchronous:
            return
        await asyncio.to_thread(self._push, self.engine.weight_version, None)

    def _update(self, version: int, weights: dict[str, torch.Tensor] | None) -> PolicyUpdate:
        """``weights`` (None: the model's) as the update of ``version`` a weight sync sends (LoRA: merged)."""
        state = merged_weights(self.model, weights)
        directory = Path(str(self.config.rllm.trainer.output_dir)) / "weight_sync"
        if self.distributed is not None and self.distributed.rank > 0:  # a rank resyncing a restarted server alone
            directory = directory / f"rank{self.distributed.rank}"
        return PolicyUpdate(
            version=version,
            save=lambda directory, dtype=None: save_weights(self.model, state, directory, dtype),
            state_bytes=lambda dtype=None: weights_bytes(state, dtype),
            directory=directory,
        )

    def _push(self, version: int, weights: dict[str, torch.Tensor] | None) -> None:
        """Every server on ``weights`` (None: the model's) as ``version``, through the run's weight sync.

        Under torchrun rank 0 pushes the whole weights, which every rank holds after an update (DDP's copies are
        equal; FSDP gathers them), while the others wait at a barrier: no rank samples before the servers hold
        the new version, and the servers load one copy, not one per rank (docs/serve.md). A push that fails stops
        rank 0 with its line, and the others report it lost.
        """
        if self.weight_sync is None:
            return
        if self.distributed is None or self.distributed.rank == 0:
            self.weight_sync.push(self._update(version, weights))
        if self.distributed is not None:
            self.distributed.barrier()
        self._rollout_version = version

    def _resync(self, server: str) -> None:
        """A server lost the policy's weights (restarted): it gets those of the engine's version again, before it
        samples (an asynchronous run's are the published ones the batch samples, not the model's)."""
        if self.weight_sync is None or self.engine is None:
            return
        version = self.engine.weight_version
        with self._publishing:
            weights = self._published.get(version)
        if self.asynchronous and weights is None:
            raise TrainerError(
                f"{server} lost its weights and needs policy version {version} again, which is no longer kept "
                f"(published: {sorted(self._published)})."
            )
        self.weight_sync.push_to(self._update(version, weights if self.asynchronous else None), server)

    @property
    def loss_description(self) -> str:
        roles = "".join(
            f", role {role}: {settings.describe()}" for role, settings in sorted(self.role_settings.items())
        )
        return self.default_settings.describe() + roles

    @property
    def overlaps_rollouts(self) -> bool:
        """Rollouts sample from their own copy of the weights (or the servers' weights), so they can run while the
        update runs."""
        return True

    def publish_weights(self, version: int) -> None:
        weights = {name: tensor.detach().clone() for name, tensor in self.model.state_dict().items()}
        with self._publishing:
            self._published[version] = weights

    def refresh_rollout_weights(self, version: int, oldest: int) -> None:
        """The rollout copy loads ``version``'s weights; with servers the weight sync pushes them (nothing samples now,
        so every step of the next batch carries the version the servers report)."""
        engine = self.engine
        with self._publishing:
            weights = self._published.get(version)
            for old in [v for v in self._published if v < oldest]:
                del self._published[old]
        if engine is None or weights is None:
            raise TrainerError(
                f"The rollout weights of policy version {version} were asked for, but they were not published "
                f"(published: {sorted(self._published)})."
            )
        if version != self._rollout_version:
            if self.weight_sync is not None:
                self._push(version, weights)  # outside the lock: the update thread may publish meanwhile
            else:
                load_checked(self.rollout_model, weights, lambda problem: _unfit(version, problem))
                self._rollout_version = version
        engine.weight_version = version

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
        if int(self.options.mini_batches) < 1 or int(self.options.micro_batches) < 1:
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

        Either way this backend does the update; with servers, :meth:`on_policy_updated` sends them the
        new weights through the run's weight sync (and :meth:`on_train_start` the first ones).
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
            self.weight_sync = weight_sync_for(self.config, servers)
            self.engine = OpenAIEngine.from_config(
                self.config,
                self.tokenizer,
                max_prompt_length=max_prompt_length,
                max_response_length=max_new_tokens,
                sampling_params=params,
                greedy_validation=bool(options.greedy_validation),
                seed=int(options.seed),
            )
            self.engine.resync = self._resync
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
        import time

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

    async def process_backend_batch(self, trainer_state: TrainerState) -> None:
        """The old policy's log-probs (PPO's denominator), the reference policy's, and the KL-in-reward penalty.

        The penalty uses the policy that sampled the batch (the old log-probs) against the
        reference and reaches the rewards here, before stage 6 computes advantages.
        """
        batch: RowBatch = trainer_state.backend_batch
        set_training(self.model, False)  # LoRA's dropout: the old policy's log-probs are the model's, not a draw
        with torch.no_grad():
            entropy = squares = None
            wanted = {"entropy", "sum_pi_squared"} & self.token_fields
            if self.algorithm.rollout_correction.bypass_mode:
                batch.old_logps = batch.rollout_logps
                if wanted:
                    _, entropy, squares = self._statistics(self.model, batch, wanted)
            elif not self._old_policy_is_the_updates():
                batch.old_logps, entropy, squares = self._statistics(self.model, batch, wanted)
            if self.reference is not None:
                batch.ref_logps = self._statistics(self.reference, batch)[0]
            teacher = None if self.teacher is None else self._statistics(self.teacher, batch)[0]
        if self.token_fields:
            per_token = {
                "old_log_probs": batch.old_logps,
                "entropy": entropy,
                "sum_pi_squared": squares,
                "teacher_log_probs": teacher,
            }
            batch.put_on_steps({k: v for k, v in per_token.items() if k in self.token_fields and v is not None})
        correction = self.default_settings.checked
        if correction.rejection:  # verl's rejection leaves the normalisers too: the kept tokens are counted
            keep, metrics = rejection_mask(
                batch.old_logps, torch.nan_to_num(batch.rollout_logps) * batch.mask, batch.mask, correction.rejection
            )
            batch.counted = batch.mask * keep
            trainer_state.metrics.update({f"actor/{k}": v for k, v in metrics.items()})
        if batch.old_logps is not None:
            trainer_state.metrics.update(self._rollout_gap(batch))
        if self.kl_in_reward is not None and batch.ref_logps is not None:
            penalty, metrics = self.kl_in_reward.penalty(batch.old_logps, batch.ref_logps, batch.mask)
            metrics.update(subtract_from_rewards(trainer_state.trajectory_groups, batch.steps, batch.per_step(penalty)))
            trainer_state.metrics.update(metrics)

    def _old_policy_is_the_updates(self) -> bool:
        """Whether the old log-probs are those the update's one forward pass computes, so stage 5 skips its pass.

        So it is with one optimizer step per batch (``ppo_epochs`` and ``mini_batches`` 1) in one
        process, when nothing before the update reads them: no estimator's per-token field, no
        KL in the reward, no rollout rejection, no LoRA dropout. The update's forward runs on the weights stage 5
        would have scored with; its log-probs, detached, are the old policy's (as TRL skips the
        pass when generation and optimisation are aligned).
        """
        options = self.options
        return (
            self.distributed is None
            and int(options.ppo_epochs) == 1
            and int(options.mini_batches) == 1
            and not self.token_fields
            and self.kl_in_reward is None
            and not self.default_settings.checked.rejection
            and (self.lora is None or self.lora.dropout == 0)  # the update's forward draws LoRA's dropout
        )

    @staticmethod
    def _rollout_gap(batch: RowBatch) -> dict[str, float]:
        """``actor/rollout_logprob_diff``: how far the sampler's log-probs are from the old policy's."""
        known = (batch.mask > 0) & ~torch.isnan(batch.rollout_logps)
        if batch.old_logps is None or not bool(known.any()):
            return {}
        return {"actor/rollout_logprob_diff": float((batch.old_logps - batch.rollout_logps).abs()[known].mean())}

    def _statistics(
        self,
        model: Any,
        batch: RowBatch,
        wanted: Collection[str] = (),
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """The batch's token log-probs under ``model``, and the ``wanted`` ones of its entropies and sums of squared
        probabilities (None when not wanted: at a real vocabulary each is a pass over every position's logits).

        With several ranks each computes its share of the rows, then all hold all.
        """
        entropy, squares = "entropy" in wanted, "sum_pi_squared" in wanted
        group = self.distributed
        if group is None:
            scores = score_tokens(model, batch.ids, batch.attention, batch.start, entropy=entropy, squares=squares)
            return scores.log_probs, scores.entropy, scores.sum_pi_squared
        rows = group.rows(batch.rows)
        if len(rows):
            ids, attention = batch.ids[rows.start : rows.stop], batch.attention[rows.start : rows.stop]
            scores = score_tokens(model, ids, attention, batch.start, entropy=entropy, squares=squares)
            parts = (scores.log_probs, scores.entropy, scores.sum_pi_squared)
        else:
            empty = batch.mask[:0].float()
            parts = (empty, empty if entropy else None, empty if squares else None)
        gathered = [None if part is None else group.gather_rows(part, batch.rows) for part in parts]
        return gathered[0], gathered[1], gathered[2]  # type: ignore[return-value]

    def _micro_batches(self, mini: torch.Tensor, lengths: torch.Tensor) -> list[torch.Tensor]:
        """This rank's micro-batches of a mini-batch (``lengths``: every row's tokens).

        With several ranks the mini-batch is cut into ``micro_batches`` pieces rounded up to a
        multiple of the world size, and each rank takes as many consecutive pieces: the cut is
        the one process's at that count, so the gradient sums the same pieces in the same order
        (2 ranks give 1 process's gradient bit for bit). A piece may be empty (fewer rows than
        pieces); its rank still joins the all-reduce. With ``max_tokens_per_micro_batch`` each
        piece is cut further (:func:`within_budget`).
        """
        group, wanted = self.distributed, int(self.options.micro_batches)
        if group is None:
            pieces = list(torch.tensor_split(mini, min(wanted, len(mini))))
        else:
            count = group.world_size * math.ceil(wanted / group.world_size)
            mine = group.rows(count)
            pieces = list(torch.tensor_split(mini, count)[mine.start : mine.stop])
        budget = int(self.options.max_tokens_per_micro_batch)
        if budget <= 0:
            return pieces
        return [part for piece in pieces for part in (within_budget(piece, lengths, budget) if len(piece) else [piece])]

    def _micro_scores(self, batch: RowBatch, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The rows' log-probs and entropies under the trained model, as ``[rows, batch width - 1]``.

        The forward runs on the rows cut to their longest (the padding after it changes nothing
        before it) from their first response token; the entropy has a gradient with an entropy
        bonus, else it is computed without one for ``actor/entropy`` and the losses that read it.
        """
        mask = batch.mask[rows]
        width = int(batch.attention[rows].sum(1).max())
        responses = mask[:, : max(width - 1, 0)].any(0).nonzero()
        start = int(responses[0]) if len(responses) else 0
        scores: TokenScores = score_tokens(
            self.trained,
            batch.ids[rows, :width],
            batch.attention[rows, :width],
            start,
            entropy=True,
            entropy_grad=self.entropy_bonus,
        )
        after = (0, mask.shape[1] - scores.log_probs.shape[1])
        entropy = scores.entropy if scores.entropy is not None else torch.zeros_like(scores.log_probs)
        return torch.nn.functional.pad(scores.log_probs, after), torch.nn.functional.pad(entropy, after)

    async def update_policy(self, trainer_state: TrainerState) -> None:
        batch: RowBatch = trainer_state.backend_batch
        from_update = batch.old_logps is None and self._old_policy_is_the_updates()
        if from_update:  # filled by the forward pass below, before the loss reads them
            batch.old_logps = torch.zeros_like(batch.mask)
        if batch.old_logps is None:
            raise TrainerError("The policy update ran before stage 5 computed the old log-probs.")
        import time

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
        for _epoch in range(int(options.ppo_epochs)):
            order = torch.randperm(n, generator=self.update_rng).to(self.device)
            for mini in torch.tensor_split(order, min(int(options.mini_batches), n)):
                # the normalisation of loss_agg_mode is the whole mini-batch's, on every rank
                totals = batch.totals(mini)
                self.optimizer.zero_grad(set_to_none=True)
                mini_loss = 0.0
                pieces = self._micro_batches(mini, lengths)
                for index, rows in enumerate(pieces):
                    sync = group is None or index == len(pieces) - 1
                    with nullcontext() if group is None else group.no_sync(self.trained, sync):
                        if not len(rows):  # a rank without rows here still joins the gradient all-reduce
                            idle = score_tokens(self.trained, batch.ids[mini[:1]], batch.attention[mini[:1]])
                            self._backward(idle.log_probs.sum() * 0.0, group)
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
                if group is not None:
                    mini_loss = group.total(mini_loss)
                if not math.isfinite(mini_loss):
                    self.optimizer.zero_grad(set_to_none=True)
                    raise TrainerError(
                        f"Step {trainer_state.global_step}: the policy loss {losses} is "
                        f"{mini_loss} (not finite); the model was not updated and no checkpoint of this "
                        "step is written. Lower rllm.transformers.lr or check the advantages and rewards."
                    )
                scaler = self.grad_scaler
                if scaler is not None:  # the gradient as the loss's own, before clipping (overflows are recorded)
                    scaler.unscale_(self.optimizer)
                norm = torch.nn.utils.clip_grad_norm_(self.trained.parameters(), float(options.max_grad_norm))
                norm = norm.full_tensor() if hasattr(norm, "full_tensor") else norm  # FSDP: a DTensor
                finite = bool(torch.isfinite(norm))
                if not finite and scaler is None:
                    self.optimizer.zero_grad(set_to_none=True)
                    raise TrainerError(
                        f"Step {trainer_state.global_step}: the gradient of the policy loss {losses} "
                        "is not finite; the model was not updated and no checkpoint of this step is written."
                    )
                if scaler is None:
                    self.optimizer.step()
                else:  # an overflow skips the step and lowers the scale, as torch.amp does
                    scaler.step(self.optimizer)
                    scaler.update()
                    sums["actor/loss_scale"].append(float(scaler.get_scale()))
                    sums["actor/skipped_steps"].append(0.0 if finite else 1.0)
                sums["actor/loss"].append(mini_loss)
                if finite:
                    sums["actor/grad_norm"].append(float(norm))
        if group is not None and group.sharded:  # rollouts and stage 5 sample and score with the whole weights
            self.model.load_state_dict(group.full_weights(self.trained))
        if group is not None:  # the micro-batch metrics of every rank (the loss and norm are the same on all)
            merged: dict[str, list[float]] = defaultdict(list)
            for part in group.gather(dict(sums)):
                for key, values in part.items():
                    merged[key].extend(values)
            sums = merged
        if from_update:
            trainer_state.metrics.update(self._rollout_gap(batch))
        if self.engine is not None and not self.asynchronous:  # what is sampled from now on has the new version
            self.engine.weight_version += 1
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

    def _required_token_fields(self) -> set[str]:
        algorithm = self.algorithm
        names = [algorithm.estimator, *algorithm.estimator_map.values()]
        needed = {f for n in names for f in get_estimator(str(getattr(n, "value", n))).requires}
        return needed & set(TOKEN_FIELDS)

    def _backward(self, loss: torch.Tensor, group: Distributed | None) -> None:
        """``loss.backward()`` (fp16-mixed: of the scaled loss); under DDP a lost rank there is the one-line error,
        not a traceback."""
        if self.grad_scaler is not None:
            loss = self.grad_scaler.scale(loss)
        if group is None:
            loss.backward()
            return
        with group.collective("all-reducing gradients"):
            loss.backward()

    def _settings(self, role: str) -> LossSettings:
        return self.role_settings.get(role, self.default_settings)

    def _micro_loss(
        self,
        batch: RowBatch,
        rows: torch.Tensor,
        logp: torch.Tensor,
        entropy: torch.Tensor,
        advantages: torch.Tensor,
        role_of: torch.Tensor,
        role_names: list[str],
        totals: MiniBatchTotals,
        sums: dict[str, list[float]],
    ) -> torch.Tensor:
        """The micro-batch's share of its mini-batch's loss: each role's rows through that role's registered loss."""
        loss = torch.zeros((), device=self.device)
        if batch.old_logps is None:
            raise TrainerError("The policy update ran before stage 5 computed the old log-probs.")
        for index, role in enumerate(role_names):
            mine = role_of[rows] == index
            if not bool(mine.any()):
                continue
            picked = rows[mine]
            mask = batch.mask[picked]
            settings = self._settings(role)
            part, metrics = settings.compute(
                log_probs=logp[mine],
                old_log_probs=batch.old_logps[picked],
                advantages=advantages[picked],
                response_mask=mask,
                rollout_log_probs=torch.nan_to_num(batch.rollout_logps[picked]) * mask,
                ref_log_probs=None if batch.ref_logps is None else batch.ref_logps[picked],
                entropy=entropy[mine],
                prompt_ids=batch.prompts[picked],
                batch_num_tokens=totals.tokens,
                global_batch_size=totals.rows,
                prompt_num_tokens=totals.prompt_tokens[picked],
                num_prompts=totals.prompts,
            )
            loss = loss + part
            # the role's loss over its own tokens (or sequences, prompts), as if it were the whole mini-batch
            if settings.agg_mode == "prompt-mean":
                share = float(totals.prompts) / max(len(set(batch.prompts[picked].tolist())), 1)
            elif settings.agg_mode.startswith("seq"):
                share = totals.rows / len(picked)
            else:
                share = float(totals.tokens / mask.sum())
            sums[f"actor/{role}/loss"].append(float(part.detach()) * share)
            for key, value in metrics.items():
                sums[f"actor/{key}"].append(float(value))
        return loss

    @staticmethod
    def _token_metrics(
        sums: dict[str, list[float]], mask: torch.Tensor, entropy: torch.Tensor, logp: torch.Tensor, old: torch.Tensor
    ) -> None:
        """Token means of one micro-batch: entropy and the approximate KL to the old policy."""
        with torch.no_grad():
            count = mask.sum().clamp(min=1)
            sums["actor/entropy"].append(float((entropy * mask).sum() / count))
            sums["actor/approx_kl"].append(float(((old - logp.detach()) * mask).sum() / count))

    # -- checkpoints --------------------------------------------------------------------------
    def prepare_checkpoint(self) -> None:
        """Under FSDP, every rank gathers the whole optimizer state that rank 0 then writes."""
        group = self.distributed
        if group is not None and group.sharded:
            named = group.full_optimizer(self.trained, self.optimizer)
            names = [name for name, _ in self.trained.named_parameters()]
            self._gathered_optimizer = {
                "state": {names.index(name): value for name, value in named["state"].items()},
                "param_groups": [{**g, "params": [names.index(n) for n in g["params"]]} for g in named["param_groups"]],
            }

    def _optimizer_state(self) -> dict[str, Any]:
        """The optimizer's state as one process's AdamW over the whole model holds it (what a checkpoint stores)."""
        if self.distributed is None or not self.distributed.sharded:
            return self.optimizer.state_dict()
        if self._gathered_optimizer is None:
            raise TrainerError("save_checkpoint ran under FSDP without prepare_checkpoint gathering the optimizer.")
        return self._gathered_optimizer

    def _load_sharded(self) -> None:
        """Under FSDP, a loaded checkpoint reaches the sharded copy at the next update, where every rank is."""
        group, state = self.distributed, self._pending_optimizer
        if group is None or not group.sharded or state is None:
            return
        names = [name for name, _ in self.trained.named_parameters()]
        named = {
            "state": {names[index]: value for index, value in state["state"].items()},
            "param_groups": [{**g, "params": [names[i] for i in g["params"]]} for g in state["param_groups"]],
        }
        group.load_sharded(self.trained, self.optimizer, self.model.state_dict(), named if named["state"] else None)
        self._pending_optimizer = None

    def save_checkpoint(self, directory: Path) -> None:
        """The model, optimizer and generators (:func:`save_training_state`), and the KL-in-reward coefficient.

        The coefficient is checked as :meth:`load_checkpoint` checks it before any file is
        written, so a value the loader would refuse fails the save instead of the resume.
        """
        extra: dict[str, Any] = {}
        if self.grad_scaler is not None:
            extra["grad_scaler"] = self.grad_scaler.state_dict()
        if self.kl_in_reward is not None:
            extra["kl_in_reward_coef"] = check_kl_coef(self.kl_in_reward.coef, "The KL-in-reward coefficient")
        if self.lora is not None:
            extra["lora"] = self.lora.as_json()
        model = self.model if self.adapted is None else self.adapted  # peft's save_pretrained: the adapter alone
        save_training_state(directory, model, self.tokenizer, self._optimizer_state(), self._generators(), extra)

    def load_checkpoint(self, directory: Path) -> None:
        sharded = self.distributed is not None and self.distributed.sharded
        apply = self._keep_for_sharded if sharded else self.optimizer.load_state_dict
        saved = load_training_state(directory, self.model, self.optimizer, self._generators(), apply, self._adapter())
        if self.grad_scaler is not None and "grad_scaler" in saved:
            self.grad_scaler.load_state_dict(saved["grad_scaler"])
        if self.kl_in_reward is not None and "kl_in_reward_coef" in saved:  # else: a checkpoint of a run without it
            self.kl_in_reward.coef = saved["kl_in_reward_coef"]

    def _adapter(self) -> Any:
        """With LoRA, what loads a checkpoint's model part: the adapter onto this run's base model."""
        adapted, settings = self.adapted, self.lora
        if adapted is None or settings is None:
            return None
        return lambda model_dir, saved: load_adapter(adapted, model_dir, settings, saved.get("lora"))

    def _keep_for_sharded(self, state: dict[str, Any]) -> None:
        self._pending_optimizer = state

    def _generators(self) -> dict[str, torch.Generator]:
        return {"sample": self.sample_rng, "update": self.update_rng}


def within_budget(rows: torch.Tensor, lengths: torch.Tensor, budget: int) -> list[torch.Tensor]:
    """``rows`` cut into consecutive pieces whose rows x longest row's tokens is at most ``budget``.

    The rows are taken longest first, so each piece's padding is small; a row longer than the
    budget is a piece of its own. The loss of every piece uses the mini-batch's normalisers,
    so the gradient is the same sum in another grouping.
    """
    order = rows[torch.argsort(lengths[rows], descending=True, stable=True)]
    sizes = lengths[order].tolist()
    pieces: list[torch.Tensor] = []
    begin = 0
    for index in range(1, len(sizes) + 1):
        if index == len(sizes) or (index - begin + 1) * sizes[begin] > budget:
            pieces.append(order[begin:index])
            begin = index
    return pieces
