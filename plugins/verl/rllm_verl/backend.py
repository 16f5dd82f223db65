"""``rllm.backend=verl``: rllm's trainer with stage 5 and the update on verl's training worker (see docs/verl.md).

The shipped plugins never import each other, so this backend does not import rllm_transformers:
it takes the ``transformers`` backend class from core's backend registry when this module is
imported (a run selecting ``verl`` imports it) and builds on it. The parent's parts stay as they
are: the rollouts (its in-process engine, or with ``rllm.rollout.openai.base_url`` its OpenAI
engine over inference servers), stage 4's packed rows, checkpoints. Stage 5's old log-probs and
stage 7's update run on :class:`rllm_verl.worker.VerlWorker` (verl's ``TrainingWorker``, FSDP2,
the CPU platform and gloo), and after each update the worker's weights are loaded into the
parent's model, which the trainer's policy channel takes to where rollouts sample (the
in-process engine samples that model, or its copy in an asynchronous run, whose stages 4-7 and
so every worker call run on the trainer's update thread; servers are sent it through the run's
weight sync). With a
KL term (in the loss or the reward) a second, forward-only worker holds the frozen reference
policy (verl's ``ref`` role) and stage 5 scores the batch on it too. The ``rllm.verl`` keys are
turned into the ``rllm.transformers`` settings those parts read
(:func:`rllm_verl.backend_keys.transformers_settings`).
"""

from __future__ import annotations

import importlib.util
import math
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from rllm.config import unhonoured_keys
from rllm.errors import ConfigError, TrainerError
from rllm.trainer import TrainerState, resolve_backend, scheduled_lr
from rllm_verl.backend_keys import SECTION, transformers_settings

_MISSING = [name for name in ("verl", "torch", "transformers") if importlib.util.find_spec(name) is None]
if _MISSING:  # named for this backend, not for the transformers backend it builds on
    raise ConfigError(
        f"rllm.backend=verl needs {', '.join(_MISSING)}: pip install 'rllm[verl,transformers]' (on a machine without "
        "a GPU, install torch's CPU build first; docs/verl.md)."
    )
_Parent: Any = resolve_backend("transformers", OmegaConf.create())
"""The transformers backend, as core's registry gives it (a plugin uses another's parts through core only)."""

_REFUSED = {
    "rllm.algorithm.rollout_correction.off_policy_mask_threshold": (
        "TRL's off-policy mask reads the sampler's log-probs inside the policy loss, and verl's ppo_loss passes the "
        "loss only the importance weights; leave it unset (tis_mode and rollout_rs work), or train with "
        "rllm.backend=transformers"
    ),
}
"""Keys this backend refuses when set away from their defaults (key: what to do)."""


def _inner_config(config: DictConfig) -> DictConfig:
    """The run's config with ``rllm.transformers`` holding what the ``rllm.verl`` keys say (the parent reads it)."""
    inner = config.copy()
    settings = transformers_settings(OmegaConf.select(config, SECTION))
    inner.rllm.transformers = OmegaConf.merge(config.rllm.transformers, settings)
    return inner


def _refuse_keys(config: DictConfig) -> None:
    """The settings the harness does not cover, by name."""
    for key, value in unhonoured_keys(config, _REFUSED).items():
        reason = next(text for prefix, text in _REFUSED.items() if key == prefix or key.startswith(prefix + "."))
        raise ConfigError(f"{key}={value!r} is not supported by the verl backend: {reason}.")


class VerlBackend(_Parent):  # type: ignore[misc, valid-type]
    """``rllm.backend=verl``: verl's worker on gloo (CPU) or its CUDA platform (one GPU); rollouts in process or
    from inference servers."""

    batch_fields = frozenset({"old_log_probs"})
    """Stage 5 writes the worker's old log-probs on the steps when an estimator reads them; nothing else."""

    def __init__(self, config: DictConfig, **kwargs: Any) -> None:
        _refuse_keys(config)  # before the model is built
        on_gpu = OmegaConf.select(config, f"{SECTION}.device") == "cuda"
        if on_gpu:  # named for this backend's key before the parent reads its own device
            from rllm_verl.process_group import require_cuda

            require_cuda()
        super().__init__(_inner_config(config), **kwargs)
        self.verl = OmegaConf.select(config, SECTION)
        from rllm_verl.cpu_platform import prepare_cpu_process
        from rllm_verl.process_group import prepare_cuda_process

        self.owns_group = self.distributed is None
        """One process: the worker's group is this backend's to close (under torchrun the parent's is used)."""
        prepare_cuda_process() if on_gpu else prepare_cpu_process()
        from rllm_verl.worker import VerlWorker
        from rllm_verl.worker_settings import WorkerOptions, loss_choice

        settings = self.default_settings
        micro = self.verl.actor.ppo_micro_batch_size_per_gpu
        options = WorkerOptions(
            lr=float(self.options.lr),
            betas=(float(self.options.adam_beta1), float(self.options.adam_beta2)),
            weight_decay=float(self.options.weight_decay),
            max_grad_norm=float(self.options.max_grad_norm),
            micro_batch_size=None if micro is None else int(micro),
            loss=settings.name,
            loss_agg_mode=settings.agg_mode,
            loss_options=dict(settings.options or {}),
            kl_coef=float(settings.kl_coef),
            kl_kind=str(settings.kl_kind),
            entropy_coeff=float(settings.entropy_coeff),
            other_losses=[loss_choice(s) for _, s in sorted(self.role_settings.items())],
        )
        self.model_dir = Path(tempfile.mkdtemp(prefix="rllm-verl-model-"))
        """The initial weights the worker loads (the parent's model as built: the tiny model's seed, fp32)."""
        self.model.save_pretrained(self.model_dir)
        pad_id = int(self.tokenizer.pad_token_id)
        self.worker = VerlWorker(self.model_dir, options, pad_id=pad_id)
        if self.reference is not None:  # the KL loss or KL in the reward: verl's ref role holds the frozen policy
            self.reference = VerlWorker(self.model_dir, WorkerOptions(reference=True), pad_id=pad_id)
            """The parent's frozen copy, replaced by a forward-only verl worker on the same initial weights."""

    def validate_config(self) -> None:
        super().validate_config()
        _refuse_keys(self.config)

    def shutdown(self) -> None:
        super().shutdown()
        if self.owns_group:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()
        shutil.rmtree(self.model_dir, ignore_errors=True)

    def _statistics(self, model: Any, batch: Any, wanted: Any = ()) -> tuple[Any, None, None]:
        """Stage 5's scoring (the parent's ``process_backend_batch`` calls it) on verl's workers: the policy's on the
        actor worker, the reference's on the ref worker; each shards the rows over the ranks itself."""
        if wanted:
            raise TrainerError(f"The verl backend's workers give log-probs only, not {', '.join(sorted(wanted))}.")
        worker = self.worker if model is self.model else model
        return worker.log_probs(batch.ids, batch.attention, batch.mask), None, None

    def _old_policy_is_the_updates(self) -> bool:
        """Never: the update on verl's worker takes the old log-probs stage 5 computed."""
        return False

    async def update_policy(self, trainer_state: TrainerState) -> None:
        """Stage 7: ``ppo_epochs`` passes over the batch, shuffled when there is more than one step (the transformers
        backend's order, from its update generator), and cut into mini-batches of at most ``ppo_mini_batch_size``
        rows, one optimizer step on the worker each: the rows grouped by their role's loss (``loss_fn_map``), each
        group's gradient added before the step, with rollout correction's importance weights and rejection; then
        the worker's weights into the model the rollouts sample."""
        batch = trainer_state.backend_batch
        if batch.old_logps is None:
            raise TrainerError("The policy update ran before stage 5 computed the old log-probs.")
        import torch

        started = time.perf_counter()
        lr = scheduled_lr(float(self.options.lr), self.algorithm, trainer_state.global_step, trainer_state.total_steps)
        old = torch.nan_to_num(batch.old_logps) * batch.mask  # bypass mode: the sampler's, unknown off the response
        ref = None if batch.ref_logps is None else batch.ref_logps * batch.mask
        advantages = batch.advantages()
        weights = self._correction_weights(batch, old)
        counted = batch.mask if batch.counted is None else batch.counted
        size = self.verl.actor.ppo_mini_batch_size
        pieces = 1 if size is None else math.ceil(batch.rows / int(size))
        epochs = int(self.verl.actor.ppo_epochs)
        runs: list[dict[str, float]] = []
        losses = ", ".join(sorted({self._settings(role).name for role in batch.roles}))
        for _epoch in range(epochs):  # the transformers backend's passes and mini-batches
            # one pass in one mini-batch: the rows in their order (a shuffle would only change float32's rounding)
            one = epochs == 1 and pieces == 1
            order = torch.arange(batch.rows) if one else torch.randperm(batch.rows, generator=self.update_rng)
            for mini in torch.tensor_split(order, min(pieces, batch.rows)):
                groups = self._loss_groups(batch, mini, old, advantages, ref, weights)
                run = self.worker.update_groups(groups, lr, tokens=int(counted[mini].sum()))
                loss = run.get("loss", math.nan)
                if not math.isfinite(loss):
                    raise TrainerError(
                        f"Step {trainer_state.global_step}: the policy loss {losses} is {loss} (not finite) on "
                        "verl's worker; no checkpoint of this step is written. Lower rllm.verl.actor.optim.lr or "
                        "check the advantages and rewards."
                    )
                runs.append(run)
        verl_metrics = {key: sum(r[key] for r in runs if key in r) / sum(key in r for r in runs) for key in runs[0]}
        self.model.load_state_dict(self.worker.full_weights())  # the weights the policy channel takes to rollouts
        tokens = float(batch.mask.sum())
        metrics = {f"actor/{key}": value for key, value in verl_metrics.items() if not key.startswith("perf/")}
        metrics.update(
            {
                "actor/lr": lr,
                "actor/tokens": tokens,
                "perf/update_tokens_per_s": tokens / max(time.perf_counter() - started, 1e-9),
            }
        )
        if self.rollout_seconds > 0:
            metrics["perf/rollout_tokens_per_s"] = self.rollout_tokens / self.rollout_seconds
        self.rollout_tokens, self.rollout_seconds = 0, 0.0
        trainer_state.metrics.update(metrics)

    def _correction_weights(self, batch: Any, old: Any) -> Any:
        """Rollout correction's truncated importance weights of the old policy over the sampler (``tis_mode``), as the
        transformers backend's loss computes them; None without ``tis_mode``."""
        settings = self.default_settings
        if settings.tis_mode is None:
            return None
        import torch

        from rllm.losses import truncated_is_weights

        sampler = torch.nan_to_num(batch.rollout_logps) * batch.mask  # the transformers backend's sampler
        return truncated_is_weights(
            old, sampler, batch.mask, settings.tis_mode, float(settings.tis_cap), settings.tis_lower
        )

    def _loss_groups(self, batch: Any, mini: Any, old: Any, advantages: Any, ref: Any, weights: Any) -> list[Any]:
        """A mini-batch's rows grouped by their role's loss (``loss_fn_map``), in the order of the rows."""
        from rllm_verl.worker_settings import UpdateGroup, loss_choice

        by_loss: dict[str, tuple[Any, list[int]]] = {}
        for row in mini.tolist():
            choice = loss_choice(self._settings(batch.roles[row]))
            by_loss.setdefault(choice.key, (choice, []))[1].append(row)
        groups = []
        for choice, rows in by_loss.values():
            picked = mini.new_tensor(rows)
            groups.append(
                UpdateGroup(
                    batch.ids[picked],
                    batch.attention[picked],
                    batch.mask[picked],
                    old[picked],
                    advantages[picked],
                    loss=choice,
                    ref_log_probs=None if ref is None else ref[picked],
                    rollout_is_weights=None if weights is None else weights[picked],
                    counted=None if batch.counted is None else batch.counted[picked],
                )
            )
        return groups

    # -- checkpoints: the parent writes the model and its optimizer; the worker's state goes through them ------------
    def prepare_checkpoint(self) -> None:
        """The worker's whole optimizer state into the parent's optimizer (by parameter name), which the save writes."""
        super().prepare_checkpoint()
        named = self.worker.full_optimizer_state()
        names = [name for name, _ in self.model.named_parameters()]
        self.optimizer.load_state_dict(
            {
                "state": {names.index(name): value for name, value in named["state"].items()},
                "param_groups": [{**g, "params": [names.index(n) for n in g["params"]]} for g in named["param_groups"]],
            }
        )

    def load_checkpoint(self, directory: Path) -> None:
        """The parent loads the model and optimizer; the worker's shards get both."""
        super().load_checkpoint(directory)
        state = self.optimizer.state_dict()
        names = [name for name, _ in self.model.named_parameters()]
        named = None
        if state["state"]:
            named = {
                "state": {names[index]: value for index, value in state["state"].items()},
                "param_groups": [{**g, "params": [names[i] for i in g["params"]]} for g in state["param_groups"]],
            }
        self.worker.load_full_state(self.model.state_dict(), named)
