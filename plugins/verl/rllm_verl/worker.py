"""verl's training worker (``TrainingWorker``, FSDP2) driven by rllm: log-probs and updates on rllm's row batch.

Every rank of a run builds one :class:`VerlWorker` and hands it the whole batch, as rllm's
backends do; the worker takes its rank's rows (after DP padding) and all ranks get every row's
log-probs back. The update runs verl's ``train_batch`` in its parts (zero grad, one
``forward_backward`` per loss group over its micro-batches, then one clip and step) with verl's
``ppo_loss`` calling rllm's loss by its verl name ``rllm.<loss>`` (registered by
:mod:`rllm_verl.losses_in_verl`), so the loss's normalisation is verl's global one (the
mini-batch's tokens over every rank, every group's). fp32 throughout: verl's mixed
precision is set to fp32 so the numbers are the transformers backend's.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import torch

from rllm.errors import TrainerError
from rllm_verl.cpu_platform import check_verl_version
from rllm_verl.rows import from_responses, to_verl_batch
from rllm_verl.worker_settings import UpdateGroup, WorkerOptions, actor_config, shim_trl

FP32 = {"param_dtype": "fp32", "reduce_dtype": "fp32", "buffer_dtype": "fp32"}
RENAMED = {"entropy_loss": "entropy_bonus"}
"""verl's metric names that rllm's losses report under another name (the entropy term is rllm's ``entropy_bonus``)."""


class VerlWorker:
    """One rank's verl ``TrainingWorker`` on the model directory ``model``; call after the process group is up."""

    def __init__(self, model: str | Path, options: WorkerOptions, pad_id: int = 0) -> None:
        check_verl_version()
        import rllm_verl.verl_plugin  # noqa: F401  (rllm's losses are verl policy losses from here on)

        self.actor_config = actor_config(options)  # a bad loss, option or mode fails before the model is built
        self.loss_configs = {options.own_loss.key: self.actor_config}
        """verl's actor config of each loss the worker trains with, by ``LossChoice.key``."""
        for choice in options.other_losses:
            self.loss_configs.setdefault(choice.key, actor_config(options, choice))

        shim_trl()
        from verl.trainer.config import CheckpointConfig
        from verl.workers.config import FSDPEngineConfig, FSDPOptimizerConfig, HFModelConfig, TrainingWorkerConfig
        from verl.workers.engine_workers import TrainingWorker

        self.options = options
        self.pad_id = pad_id
        model_config = HFModelConfig(
            path=str(model),
            load_tokenizer=False,
            use_remove_padding=False,
            override_config={"attn_implementation": options.attn_implementation},
        )
        engine_config = FSDPEngineConfig(
            strategy="fsdp2",
            mixed_precision=dict(FP32),
            model_dtype="fp32",  # verl loads a forward-only (reference) model in bf16 unless told
            forward_only=options.reference,
            use_torch_compile=False,
            use_dynamic_bsz=False,
            micro_batch_size_per_gpu=1,
            infer_micro_batch_size_per_gpu=1,
        )
        optimizer_config = FSDPOptimizerConfig(
            lr=options.lr,
            betas=list(options.betas),
            weight_decay=options.weight_decay,
            clip_grad=options.max_grad_norm,
        )
        self.worker = TrainingWorker(
            TrainingWorkerConfig(
                model_type="language_model",
                model_config=model_config,
                engine_config=engine_config,
                optimizer_config=optimizer_config,
                checkpoint_config=CheckpointConfig(),
            )
        )
        self.worker.reset()

    @property
    def rank(self) -> int:
        return int(torch.distributed.get_rank())

    @property
    def world_size(self) -> int:
        return int(torch.distributed.get_world_size())

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        return self.worker.engine.optimizer

    def _micro_rows(self, rows: int) -> int:
        """Rows per micro-batch: each rank's share cut into ``micro_batches`` equal pieces (DP padding fills them)."""
        share = -(-rows // self.world_size)
        if self.options.micro_batch_size is not None:
            return min(self.options.micro_batch_size, share)
        return -(-share // min(self.options.micro_batches, share))

    def _shard(self, batch: dict[str, torch.Tensor], micro_rows: int) -> Any:
        """This rank's rows of a (padded) batch as verl's no-padding TensorDict."""
        from verl.utils import tensordict_utils as tu
        from verl.workers.utils.padding import left_right_2_no_padding

        share = batch["input_ids"].shape[0] // self.world_size
        mine = slice(self.rank * share, (self.rank + 1) * share)
        tensors = {name: value[mine] for name, value in batch.items()}
        settings = {
            "temperature": 1.0,
            "pad_token_id": self.pad_id,
            "micro_batch_size_per_gpu": micro_rows,
            "use_dynamic_bsz": False,
        }
        return left_right_2_no_padding(tu.get_tensordict(tensor_dict=tensors, non_tensor_dict=settings))

    def _gather(self, part: torch.Tensor, rows: int) -> torch.Tensor:
        """Every rank's share of the rows, in order, on every rank."""
        if self.world_size == 1:
            return part
        parts = [torch.empty_like(part) for _ in range(self.world_size)]
        torch.distributed.all_gather(parts, part.contiguous())
        return torch.cat(parts)[:rows]

    def log_probs(self, ids: torch.Tensor, attention: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The policy's log-prob of each next token at rllm's positions (rows x ``ids.shape[1] - 1``).

        verl scores each row's whole response block (a later turn's observation tokens too); the prompt is 0.
        """
        from verl.utils import tensordict_utils as tu
        from verl.workers.utils.padding import no_padding_2_padding

        device = ids.device  # verl takes the batch on the CPU (its engine moves each micro-batch) and returns it there
        ids, attention, mask = ids.cpu(), attention.cpu(), mask.cpu()
        micro_rows = self._micro_rows(ids.shape[0])
        batch, layout = to_verl_batch(ids, attention, mask, {}, self.pad_id, self.world_size * micro_rows)
        data = self._shard(batch, micro_rows)
        tu.assign_non_tensor(data, calculate_entropy=False, compute_loss=False, global_token_num=None)
        output = self.worker.infer_batch(data)
        values = no_padding_2_padding(tu.get(output, "log_probs"), data).float()
        whole = self._gather(values, layout.rows)
        return from_responses(whole, layout)[: ids.shape[0]].to(device)

    def update(
        self,
        ids: torch.Tensor,
        attention: torch.Tensor,
        mask: torch.Tensor,
        old_log_probs: torch.Tensor,
        advantages: torch.Tensor,
        lr: float | None = None,
        ref_log_probs: torch.Tensor | None = None,
    ) -> dict[str, float]:
        """One optimizer step on the batch (rllm's per-position old log-probs and advantages; with a KL loss the
        reference's log-probs too); verl's metrics."""
        group = UpdateGroup(ids, attention, mask, old_log_probs, advantages, ref_log_probs=ref_log_probs)
        return self.update_groups([group], lr)

    def update_groups(
        self, groups: list[UpdateGroup], lr: float | None = None, tokens: int | None = None
    ) -> dict[str, float]:
        """One optimizer step on a mini-batch whose rows are cut into ``groups``, each trained by its own loss: the
        gradients of every group's ``forward_backward`` add up before verl's one ``optimizer_step``.

        Each group's loss is normalised by the whole mini-batch (``tokens``, default every group's counted
        tokens, and its rows), so the groups' losses add up to the loss of the mini-batch, as the transformers
        backend's roles do. verl's metrics: ``loss`` summed over the groups, the others their mean.
        """
        from verl.utils import tensordict_utils as tu

        if self.options.reference:
            raise TrainerError("A reference worker (verl's ref role) only scores; it takes no update.")
        if self.options.kl_coef > 0 and any(group.ref_log_probs is None for group in groups):
            raise TrainerError("The KL loss (kl_coef > 0) needs the reference policy's log-probs for the update.")
        if lr is not None:
            for param_group in self.optimizer.param_groups:
                param_group["lr"] = lr
        if tokens is None:
            tokens = int(sum(float((g.mask if g.counted is None else g.counted).sum()) for g in groups))
        rows = sum(int(group.ids.shape[0]) for group in groups)
        engine = self.worker.engine
        outputs = []
        with engine.train_mode():
            engine.optimizer_zero_grad()
            for group in groups:
                data = self._train_data(group, rows)
                choice = self.options.own_loss if group.loss is None else group.loss
                config = self.loss_configs.get(choice.key)
                if config is None:
                    raise TrainerError(f"The worker was not built with the loss {choice.name!r} (other_losses).")
                loss_fn = partial(_mini_batch_loss, config=config, tokens=max(tokens, 1))
                outputs.append(engine.forward_backward_batch(data, loss_fn, forward_only=False))
            grad_norm = engine.optimizer_step()
        runs = []
        for output in outputs:
            output.pop("model_output", None)
            done = self.worker._postprocess_output(
                output, global_token_num=None, delta_time=0.0, forward_only=False, images_seqlens=None
            )
            numbers = {key.removeprefix("actor/"): _scalar(value) for key, value in tu.get(done, "metrics").items()}
            runs.append({RENAMED.get(key, key): number for key, number in numbers.items() if number is not None})
        keys = {key for run in runs for key in run}
        metrics = {key: sum(run[key] for run in runs if key in run) / sum(key in run for run in runs) for key in keys}
        metrics["loss"] = sum(run["loss"] for run in runs)
        metrics["grad_norm"] = float(grad_norm)
        return metrics

    def _train_data(self, group: UpdateGroup, rows: int) -> Any:
        """One group's rows as verl's training batch (this rank's share), its loss normalised by ``rows``."""
        from verl.utils import tensordict_utils as tu

        fields = {"old_log_probs": group.old_log_probs.cpu(), "advantages": group.advantages.cpu()}
        if self.options.kl_coef > 0 and group.ref_log_probs is not None:
            fields["ref_log_prob"] = group.ref_log_probs.cpu()  # verl's name in the actor's batch
        if group.rollout_is_weights is not None:
            fields["rollout_is_weights"] = group.rollout_is_weights.cpu()
        if group.counted is not None:  # the loss's mask (rejected tokens out); the layout stays the whole response
            fields["response_mask"] = group.counted.cpu()
        ids, attention, mask = group.ids.cpu(), group.attention.cpu(), group.mask.cpu()
        micro_rows = self._micro_rows(ids.shape[0])
        batch, _ = to_verl_batch(ids, attention, mask, fields, self.pad_id, self.world_size * micro_rows)
        data = self._shard(batch, micro_rows)
        engine_keys = {
            "use_remove_padding": self.worker.model_config.get("use_remove_padding", False),
            "max_token_len_per_gpu": self.worker.engine_config.max_token_len_per_gpu,
            "use_fused_kernels": self.worker.engine_config.use_fused_kernels,
        }
        tu.assign_non_tensor(
            data,
            calculate_entropy=self.options.entropy_coeff > 0,
            compute_loss=True,
            global_token_num=None,
            global_batch_size=rows,
            update_lr_scheduler=False,
            **engine_keys,
        )
        return data

    def full_weights(self) -> dict[str, torch.Tensor]:
        """The whole model's weights (every rank gathers them), under transformers' names."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        module = self.worker.engine.module
        return get_model_state_dict(module, options=StateDictOptions(full_state_dict=True, cpu_offload=False))

    def full_optimizer_state(self) -> dict[str, Any]:
        """The whole optimizer state (every rank gathers it), keyed by the parameters' transformers names."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

        options = StateDictOptions(full_state_dict=True, cpu_offload=False)
        return dict(get_optimizer_state_dict(self.worker.engine.module, self.optimizer, options=options))

    def load_full_state(self, weights: dict[str, torch.Tensor], optimizer_state: dict[str, Any] | None) -> None:
        """Whole weights (and optimizer state keyed by names, as :meth:`full_optimizer_state` gives) into the shards."""
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_model_state_dict,
            set_optimizer_state_dict,
        )

        module, options = self.worker.engine.module, StateDictOptions(full_state_dict=True)
        set_model_state_dict(module, weights, options=options)
        if optimizer_state is not None:
            set_optimizer_state_dict(module, self.optimizer, optimizer_state, options=options)


def _mini_batch_loss(model_output: Any, data: Any, dp_group: Any = None, *, config: Any, tokens: int) -> Any:
    """verl's ``ppo_loss`` with the mini-batch's token count as its normaliser (verl counts the rows it is given,
    one loss group's)."""
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.losses import ppo_loss

    tu.assign_non_tensor(data, batch_num_tokens=tokens)
    return ppo_loss(config, model_output, data, dp_group)


def _scalar(value: Any) -> float | None:
    """A metric as one number: verl reports the loss's as a list of ``Metric`` objects (one per rank, each holding
    its micro-batches' values), which verl's own trainer reduces with ``Metric.aggregate_dp``; others as tensors."""
    from verl.utils.metric.utils import Metric

    if isinstance(value, list) and value and all(isinstance(v, Metric) for v in value):
        return float(Metric.aggregate_dp(value))
    if isinstance(value, Metric):
        return float(value.aggregate())
    if isinstance(value, list):
        numbers = [_scalar(v) for v in value]
        numbers = [n for n in numbers if n is not None]
        return sum(numbers) / len(numbers) if numbers else None
    if isinstance(value, torch.Tensor):
        return float(value.detach().float().mean()) if value.numel() else None
    if isinstance(value, int | float):
        return float(value)
    return None
