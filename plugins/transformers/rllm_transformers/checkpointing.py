"""The transformers backend's checkpoint methods: what a checkpoint holds (:mod:`rllm_transformers.checkpoint`
writes and reads the files), and under FSDP the optimizer state gathered whole into rank 0's host memory and sharded
again on load.

:class:`Checkpointing` is part of :class:`~rllm_transformers.backend.TransformersBackend`; the attributes declared
here are the backend's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from rllm.errors import TrainerError
from rllm.losses import KLInReward, check_kl_coef
from rllm_transformers.checkpoint import RandomState, load_training_state, save_training_state
from rllm_transformers.distributed import Distributed
from rllm_transformers.draws import UniformStream
from rllm_transformers.lora import LoraSettings, load_adapter


class Checkpointing:
    """``prepare_checkpoint``, ``save_checkpoint`` and ``load_checkpoint`` of the transformers backend."""

    model: torch.nn.Module
    adapted: Any
    lora: LoraSettings | None
    tokenizer: Any
    trained: torch.nn.Module
    optimizer: torch.optim.Optimizer
    distributed: Distributed | None
    grad_scaler: Any
    kl_in_reward: KLInReward | None
    sample_rng: UniformStream
    update_rng: torch.Generator
    _gathered_optimizer: dict[str, Any] | None
    _pending_optimizer: dict[str, Any] | None
    host_copy: bool

    def prepare_checkpoint(self) -> None:
        """Under FSDP, every rank takes part in gathering the whole optimizer state into rank 0's host memory, which
        rank 0 then writes (the other ranks keep nothing of it)."""
        group = self.distributed
        if group is not None and group.sharded:
            named = group.full_optimizer(self.trained, self.optimizer)
            if not named:  # not rank 0
                return
            names = self._trained_names()
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
        """Under FSDP, a loaded checkpoint reaches the sharded copy at the next stage 5 or update, where every rank
        is. Rank 0 alone read the optimizer state (the other ranks its shapes, to check them), and in the host-copy
        layout the weights: it sends them a tensor at a time."""
        group, state = self.distributed, self._pending_optimizer
        if group is None or not group.sharded or state is None:
            return
        names = self._trained_names()
        named = {
            "state": {names[index]: value for index, value in state["state"].items()},
            "param_groups": [{**g, "params": [names[i] for i in g["params"]]} for g in state["param_groups"]],
        }
        weights = {} if self.host_copy and group.rank > 0 else self.model.state_dict()
        optimizer = None if not named["state"] else {} if group.rank > 0 else named  # rank 0 alone read it: it sends
        group.load_sharded(self.trained, self.optimizer, weights, optimizer, self.host_copy)
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
        self._gathered_optimizer = None  # written: rank 0's host copy is not kept until the next checkpoint

    def load_checkpoint(self, directory: Path) -> None:
        sharded = self.distributed is not None and self.distributed.sharded
        apply = self._keep_for_sharded if sharded else self.optimizer.load_state_dict
        load_model = self._adapter()
        if self.host_copy and self.distributed is not None and self.distributed.rank > 0:
            load_model = _read_by_rank_0  # this rank keeps no whole copy: rank 0 sends the weights, _load_sharded
        shapes_only = sharded and self.distributed is not None and self.distributed.rank > 0
        saved = load_training_state(
            directory, self.model, self.optimizer, self._generators(), apply, load_model, shapes_only
        )
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

    def _trained_names(self) -> list[str]:
        """The names of the optimizer's parameters in its order (with LoRA the adapters only): a checkpoint's
        optimizer state is numbered as one process's AdamW numbers them."""
        return [name for name, parameter in self.trained.named_parameters() if parameter.requires_grad]

    def _keep_for_sharded(self, state: dict[str, Any]) -> None:
        self._pending_optimizer = state

    def _generators(self) -> dict[str, RandomState]:
        return {"sample": self.sample_rng, "update": self.update_rng}


def _read_by_rank_0(model_dir: Path, saved: dict[str, Any]) -> None:
    """The model part of a checkpoint, not read on a rank that keeps no whole copy of the model."""
