"""``rllm.backend=verl``'s registration and its ``rllm.verl`` section, under verl's own key names.

Nothing here imports torch or verl: the backend is registered as the path of
:class:`rllm_verl.backend.VerlBackend`, imported when a run selects it. A verl user finds the keys
where verl keeps them (``actor_rollout_ref.model.path`` is ``rllm.verl.model.path``,
``actor.optim.lr`` is ``rllm.verl.actor.optim.lr``, ``rollout.temperature`` is
``rllm.verl.rollout.temperature``); the few rllm adds (the tiny model's shape, the built-in tasks,
the seed) sit beside them.
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig

from rllm import hookimpl
from rllm.config import ConfigKey
from rllm.plugins import BackendRegistrar, ConfigSectionRegistrar

SECTION = "rllm.verl"


def _task_names() -> list[str]:
    from rllm.tasks import TASKS

    return list(TASKS)


VERL_KEYS = (
    ConfigKey(
        "model.path",
        "str",
        "tiny",
        "verl's actor_rollout_ref.model.path: tiny (rllm's small Qwen2-style model, random weights), a directory "
        "save_pretrained wrote, or a hub id.",
    ),
    ConfigKey(
        "model.tokenizer",
        "str",
        "digits",
        "tiny's tokenizer: digits or text (a model directory or hub id brings its own).",
        choices=("digits", "text"),
    ),
    ConfigKey("model.hidden_size", "int", 64, "tiny: width (a multiple of 8).", minimum=8, multiple_of=8),
    ConfigKey("model.num_layers", "int", 2, "tiny: transformer layers.", minimum=1),
    ConfigKey(
        "actor.optim.lr",
        "float",
        0.003,
        "verl's actor.optim.lr (AdamW; rllm.algorithm.lr_schedule scales it).",
        minimum=0,
        above=True,
    ),
    ConfigKey("actor.optim.weight_decay", "float", 0.0, "verl's actor.optim.weight_decay (AdamW).", minimum=0),
    ConfigKey(
        "actor.grad_clip", "float", 1.0, "verl's actor.grad_clip: gradient-norm clipping.", minimum=0, above=True
    ),
    ConfigKey(
        "actor.ppo_micro_batch_size_per_gpu",
        "int",
        None,
        "verl's actor.ppo_micro_batch_size_per_gpu: rows per forward/backward on each rank; null: the rank's whole "
        "share at once.",
        minimum=1,
        nullable=True,
    ),
    ConfigKey(
        "actor.ppo_mini_batch_size",
        "int",
        None,
        "verl's actor.ppo_mini_batch_size, counted in rows of the batch (verl counts prompts and multiplies by "
        "rollout.n): each pass cuts the shuffled rows into ceil(rows / size) near-equal mini-batches, one optimizer "
        "step each; null: the whole batch, one step.",
        minimum=1,
        nullable=True,
    ),
    ConfigKey(
        "actor.ppo_epochs",
        "int",
        1,
        "verl's actor.ppo_epochs: passes over each batch, each with the batch shuffled again.",
        minimum=1,
    ),
    ConfigKey("rollout.temperature", "float", 1.0, "verl's rollout.temperature.", minimum=0, above=True),
    ConfigKey("rollout.top_p", "float", 1.0, "verl's rollout.top_p.", minimum=0, maximum=1, above=True),
    ConfigKey("rollout.top_k", "int", -1, "verl's rollout.top_k; -1 (or 0): off.", minimum=-1),
    ConfigKey(
        "rollout.response_length",
        "int",
        None,
        "verl's rollout.response_length: most tokens one generation returns; null: the transformers engine's default.",
        minimum=1,
        nullable=True,
    ),
    ConfigKey(
        "rollout.prompt_length",
        "int",
        None,
        "verl's rollout.prompt_length: longer prompts end the workflow unsampled; null: the engine's default.",
        minimum=1,
        nullable=True,
    ),
    ConfigKey(
        "rollout.val_kwargs.do_sample",
        "bool",
        False,
        "verl's rollout.val_kwargs.do_sample: validation samples instead of answering greedily.",
    ),
    ConfigKey(
        "tasks", "list[str]", ["digit_max"], "Built-in task families (as rllm.embedded.tasks).", names=_task_names
    ),
    ConfigKey(
        "device",
        "str",
        "cpu",
        "Where verl's worker and the in-process rollouts run: cpu (verl's worker on gloo through rllm_verl's CPU "
        "platform) or cuda (verl's own CUDA platform, one GPU).",
        choices=("cpu", "cuda"),
    ),
    ConfigKey("seed", "int", 0, "Seed of the initialisation, sampling and batch order.", minimum=0),
    ConfigKey("num_threads", "int", 0, "torch CPU threads; 0: one for a model under 1M parameters.", minimum=0),
)
"""The ``rllm.verl`` section."""


def transformers_settings(section: DictConfig) -> dict[str, Any]:
    """The ``rllm.transformers`` settings that the in-process rollouts (the transformers backend's parts) read."""
    top_k = int(section.rollout.top_k)
    return {
        "model": str(section.model.path),
        "tokenizer": str(section.model.tokenizer),
        "hidden_size": int(section.model.hidden_size),
        "num_layers": int(section.model.num_layers),
        "device": str(section.device),
        "lr": float(section.actor.optim.lr),
        "weight_decay": float(section.actor.optim.weight_decay),
        "max_grad_norm": float(section.actor.grad_clip),
        "temperature": float(section.rollout.temperature),
        "top_p": float(section.rollout.top_p),
        "top_k": max(top_k, 0),
        "max_new_tokens": section.rollout.response_length,
        "max_prompt_length": section.rollout.prompt_length,
        "greedy_validation": not bool(section.rollout.val_kwargs.do_sample),
        "tasks": list(section.tasks),
        "seed": int(section.seed),
        "num_threads": int(section.num_threads),
    }


@hookimpl
def rllm_register_backends(register: BackendRegistrar) -> None:
    register("verl", "rllm_verl.backend:VerlBackend")  # imports torch and verl only when selected


@hookimpl
def rllm_register_config_sections(register: ConfigSectionRegistrar) -> None:
    register(SECTION, VERL_KEYS)
