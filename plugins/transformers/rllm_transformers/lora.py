"""LoRA through peft (``rllm.transformers.lora.*``): adapters on the policy, the base frozen, merged for servers.

:func:`add_adapters` injects peft's LoRA layers into the policy model in place, so the model
the backend samples from and trains is still the transformers model (its forward, cache and
``logits_to_keep`` unchanged) with adapters inside; the :class:`peft.PeftModel` around it is
kept for what peft does best: saving and loading the adapter alone and turning the adapters
off (:class:`AdaptersOff`, the reference policy without a second copy of the weights).
Whatever leaves the process as whole weights (a weight sync, a Ray worker's snapshot) is
:func:`merged_weights`: ``W + scaling * B @ A``, computed out of place so the frozen base
stays bit for bit what it was.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from rllm.config import unhonoured_keys
from rllm.errors import CheckpointError, ConfigError
from rllm_transformers.checkpoint import ADAPTER_CONFIG
from rllm_transformers.plugin import LORA_EXTRA, missing_extra_error

SECTION = "rllm.transformers.lora"
ADAPTER = "default"
"""peft's name of the one adapter."""
BASE = ".base_layer."
"""Where peft puts a wrapped layer's own weights in the state dict: ``...q_proj.base_layer.weight``."""
ADAPTER_WEIGHTS = "adapter_model.safetensors"


@dataclass(frozen=True)
class LoraSettings:
    rank: int
    alpha: float
    target_modules: tuple[str, ...]
    dropout: float

    def as_json(self) -> dict[str, Any]:
        targets = list(self.target_modules)
        return {"rank": self.rank, "alpha": self.alpha, "target_modules": targets, "dropout": self.dropout}


def lora_settings(config: DictConfig) -> LoraSettings | None:
    """The run's LoRA settings, None with ``lora.rank`` 0; the other ``lora`` keys set while it is 0 are refused."""
    options = OmegaConf.select(config, SECTION)
    rank = 0 if options is None else int(options.rank)
    if rank == 0:
        stray = unhonoured_keys(config, [f"{SECTION}.alpha", f"{SECTION}.target_modules", f"{SECTION}.dropout"])
        if stray:
            key, value = next(iter(stray.items()))
            raise ConfigError(
                f"{key}={value!r} has no effect with {SECTION}.rank=0 (LoRA off); set {SECTION}.rank to the "
                "adapters' rank, or leave the key unset."
            )
        return None
    targets = tuple(str(name) for name in options.target_modules)
    if not targets:
        raise ConfigError(f"{SECTION}.target_modules is empty; name the linear layers that get adapters.")
    return LoraSettings(rank, float(options.alpha), targets, float(options.dropout))


def _peft() -> Any:
    try:
        import peft
    except ImportError as exc:
        raise missing_extra_error(exc, f"{SECTION}.rank > 0", LORA_EXTRA) from None
    return peft


def add_adapters(model: torch.nn.Module, settings: LoraSettings) -> Any:
    """peft's LoRA layers injected into ``model`` in place; returns the :class:`peft.PeftModel` around it.

    Only the adapters require gradients afterwards. A target that names no linear layer of the model is refused
    with the model's linear layer names.
    """
    linear = sorted({name.rsplit(".", 1)[-1] for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)})
    unknown = [name for name in settings.target_modules if name not in linear]
    if unknown:
        raise ConfigError(
            f"{SECTION}.target_modules names {unknown[0]!r}, which is no linear layer of this model; its linear "
            f"layers are {', '.join(linear)}."
        )
    peft = _peft()
    config = peft.LoraConfig(
        r=settings.rank,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=list(settings.target_modules),
        bias="none",
    )
    return peft.get_peft_model(model, config)


class AdaptersOff:
    """The base model, as a callable the log-prob passes take: ``model``, which holds peft's LoRA layers (the adapted
    model, or under FSDP its sharded copy), run with its adapters off as peft's ``disable_adapter()`` turns them off,
    so the reference policy costs no second copy of the weights.

    ``module`` is the model itself, as DDP names what it wraps: the log-prob pass reads its
    ``forward``'s signature (``logits_to_keep``).
    """

    def __init__(self, model: torch.nn.Module) -> None:
        from peft.tuners.tuners_utils import BaseTunerLayer

        self.module = model
        self.layers = [m for m in model.modules() if isinstance(m, BaseTunerLayer)]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        for layer in self.layers:
            layer.enable_adapters(False)
        try:
            return self.module(*args, **kwargs)
        finally:
            for layer in self.layers:
                layer.enable_adapters(True)


def trainable(module: torch.nn.Module) -> list[torch.nn.Parameter]:
    """The parameters the optimizer updates: all of them, or with LoRA the adapters only."""
    return [parameter for parameter in module.parameters() if parameter.requires_grad]


def merged_weights(model: torch.nn.Module, state: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    """``state`` (default the model's) as the plain model's state dict: each adapted layer's weight merged
    (``W + scaling * B @ A``, in float32, then the weight's dtype), the adapters dropped. Identity without LoRA.

    ``model`` gives each adapted layer's scaling; the result loads into the model class without peft.
    """
    state = model.state_dict() if state is None else state
    layers = {name: m for name, m in model.named_modules() if hasattr(m, "lora_A") and hasattr(m, "base_layer")}
    if not layers:
        return state
    out: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        if ".lora_" in key:
            continue
        if BASE not in key:
            out[key] = value
            continue
        prefix, field = key.split(BASE, 1)
        if field != "weight":
            out[f"{prefix}.{field}"] = value
            continue
        layer = layers[prefix]
        down = state[f"{prefix}.lora_A.{ADAPTER}.weight"].float()
        up = state[f"{prefix}.lora_B.{ADAPTER}.weight"].float()
        delta = up @ down
        if getattr(layer, "fan_in_fan_out", False):
            delta = delta.T
        out[f"{prefix}.weight"] = (value.float() + delta * float(layer.scaling[ADAPTER])).to(value.dtype)
    return out


def load_adapter(adapted: Any, directory: Path, settings: LoraSettings, saved: dict[str, Any] | None) -> None:
    """The adapter ``save_pretrained`` of the PeftModel wrote into ``directory``, loaded bit for bit.

    ``saved``: the LoRA settings the checkpoint was written with (:meth:`LoraSettings.as_json`); another value of
    any of them is refused by name, as a checkpoint of a whole model is.
    """
    from safetensors.torch import load_file

    if not (directory / ADAPTER_CONFIG).is_file():
        raise CheckpointError(
            f"Checkpoint {str(directory)!r} holds a whole model, no LoRA adapter; resume it with "
            f"{SECTION}.rank=0, or start over."
        )
    for key, value in settings.as_json().items():
        if saved is not None and saved.get(key) != value:
            raise CheckpointError(
                f"Checkpoint {str(directory)!r} holds an adapter with {SECTION}.{key}={saved.get(key)!r} where this "
                f"run gives {value!r}; resume with the LoRA settings it was written with, or start over."
            )
    peft = _peft()
    tensors = load_file(str(directory / ADAPTER_WEIGHTS))
    expected = set(peft.get_peft_model_state_dict(adapted))
    if set(tensors) != expected:
        other = sorted(set(tensors) ^ expected)[0]
        raise CheckpointError(
            f"Checkpoint {str(directory)!r} holds another adapter than this run's model has ({other}); resume with "
            "the same model and LoRA settings."
        )
    try:
        peft.set_peft_model_state_dict(adapted, tensors)
    except RuntimeError as exc:
        raise CheckpointError(
            f"Checkpoint {str(directory)!r} holds an adapter of another shape ({str(exc).splitlines()[0]}); resume "
            "with the same model and LoRA settings."
        ) from None
