"""The transformers backend's checkpoint files: safetensors and JSON, never pickle.

The model part is a ``save_pretrained`` directory, so any checkpoint loads with
``AutoModelForCausalLM.from_pretrained`` (with LoRA it holds the adapter, which peft loads onto the base
model); the optimizer's tensors and the random streams'
states are safetensors files, everything else one JSON file.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

import torch
from safetensors.torch import load_file, save_file

from rllm.errors import CheckpointError
from rllm_transformers.weights import load_checked

MODEL_DIR = "model"
OPTIMIZER_FILE = "optimizer.safetensors"
RNG_FILE = "rng.safetensors"
STATE_FILE = "transformers.json"
ADAPTER_CONFIG = "adapter_config.json"
"""What peft's ``save_pretrained`` writes beside a LoRA adapter: a checkpoint's model part holds the adapter only."""


class RandomState(Protocol):
    """A random stream a checkpoint keeps: torch's generators and the engine's :class:`~.draws.UniformStream`."""

    def get_state(self) -> torch.Tensor: ...

    def set_state(self, state: torch.Tensor) -> None: ...


def save_training_state(
    directory: Path,
    model: Any,
    tokenizer: Any,
    optimizer_state: Mapping[str, Any],
    generators: Mapping[str, RandomState],
    extra: Mapping[str, Any],
) -> None:
    """The model as ``save_pretrained`` writes it, the optimizer's tensors (``optimizer_state``, an
    ``optimizer.state_dict()``), the generators; the rest (and ``extra``) JSON, serialised before any file is
    written so a value JSON cannot hold fails the save, not the resume."""
    state_dict = optimizer_state
    groups = [{k: (list(v) if isinstance(v, tuple) else v) for k, v in g.items()} for g in state_dict["param_groups"]]
    state_text = json.dumps({"param_groups": groups, **extra}, allow_nan=False)
    model.save_pretrained(directory / MODEL_DIR, safe_serialization=True)
    tokenizer.save_pretrained(directory / MODEL_DIR)
    tensors = {
        f"{index}.{name}": value.detach().cpu().contiguous()
        for index, entry in state_dict["state"].items()
        for name, value in entry.items()
    }
    save_file(tensors, str(directory / OPTIMIZER_FILE))
    save_file({name: generator.get_state() for name, generator in generators.items()}, str(directory / RNG_FILE))
    (directory / STATE_FILE).write_text(state_text, encoding="utf-8")


def load_training_state(
    directory: Path,
    model: Any,
    optimizer: torch.optim.Optimizer,
    generators: Mapping[str, RandomState],
    apply_optimizer: Callable[[dict[str, Any]], Any] | None = None,
    load_model: Callable[[Path, dict[str, Any]], None] | None = None,
    optimizer_shapes_only: bool = False,
) -> dict[str, Any]:
    """Restore what :func:`save_training_state` wrote into ``model``, ``optimizer`` (checked against it, then given
    to ``apply_optimizer``, default its ``load_state_dict``) and ``generators``; returns the JSON state (``extra``'s
    keys among it). An unreadable checkpoint or a model of another shape is a named error.

    ``load_model`` (the model directory, the JSON state) loads the model part instead (LoRA: the adapter alone);
    without it a directory holding a LoRA adapter is refused. ``optimizer_shapes_only`` reads the optimizer file's
    header alone: its tensors are checked and handed on as shapes without storage (an FSDP rank whose shards rank 0
    fills)."""
    from transformers import AutoModelForCausalLM

    if load_model is None and (directory / MODEL_DIR / ADAPTER_CONFIG).is_file():
        raise CheckpointError(
            f"Checkpoint {str(directory)!r} holds a LoRA adapter, not a whole model; resume it with the "
            "rllm.transformers.lora.* settings it was written with."
        )
    try:
        loaded = None if load_model is not None else AutoModelForCausalLM.from_pretrained(str(directory / MODEL_DIR))
        tensors = _read_tensors(directory / OPTIMIZER_FILE, optimizer_shapes_only)
        rng = load_file(str(directory / RNG_FILE))
        saved: dict[str, Any] = json.loads((directory / STATE_FILE).read_text(encoding="utf-8"))
        groups = saved["param_groups"]
        states = {name: rng[name] for name in generators}
    except (OSError, KeyError, ValueError) as exc:
        raise CheckpointError(
            f"Transformers checkpoint in {str(directory)!r} is unreadable ({exc}); delete it to start over."
        ) from exc
    if load_model is not None:  # LoRA: the adapter alone, loaded by the caller
        try:
            load_model(directory / MODEL_DIR, saved)
        except RuntimeError as exc:
            raise CheckpointError(
                f"Checkpoint {str(directory)!r} holds a model of another shape than rllm.transformers.model gives "
                f"({str(exc).splitlines()[0]}); resume with the same model settings."
            ) from None
    else:
        assert loaded is not None  # set above whenever load_model is None
        load_checked(
            model,
            loaded.state_dict(),
            lambda problem: CheckpointError(
                f"Checkpoint {str(directory)!r} holds a model that does not fit the one rllm.transformers.model "
                f"gives ({problem}); resume with the same model settings."
            ),
        )
    state: dict[int, dict[str, torch.Tensor]] = defaultdict(dict)
    for key, value in tensors.items():
        index, name = key.split(".", 1)
        state[int(index)][name] = value
    for group in groups:
        group["betas"] = tuple(group["betas"])
    _check_optimizer(directory, optimizer, dict(state), groups)
    (apply_optimizer or optimizer.load_state_dict)({"state": dict(state), "param_groups": groups})
    for name, generator in generators.items():
        try:
            generator.set_state(states[name])
        except (RuntimeError, ValueError) as exc:
            raise CheckpointError(
                f"Checkpoint {str(directory)!r} holds a {name!r} random state this rllm cannot restore ({exc}); "
                "resume it with the rllm version that wrote it, or delete it to start over."
            ) from None
    return saved


def _read_tensors(path: Path, shapes_only: bool) -> dict[str, torch.Tensor]:
    """A safetensors file's tensors; ``shapes_only``: on the meta device, from the header, the data left unread."""
    if not shapes_only:
        return load_file(str(path))
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as opened:
        names = opened.keys()  # safe_open is not iterable
        return {name: torch.empty(opened.get_slice(name).get_shape(), device="meta") for name in names}


ADAMW_STATE = ("step", "exp_avg", "exp_avg_sq")
"""The tensors AdamW keeps per parameter (the backend's optimizer, without amsgrad)."""
OPTIMIZER_KEYS = {
    "betas": "rllm.transformers.adam_beta1/adam_beta2",
    "weight_decay": "rllm.transformers.weight_decay",
}
"""The optimizer settings a config key gives; the others are AdamW's own defaults."""
IMPLEMENTATION_KEYS = ("params", "lr", "fused", "foreach")
"""Not compared on resume: the schedule sets ``lr`` each step, and ``fused``/``foreach`` say how a step runs (a
checkpoint written before the backend's AdamW was fused resumes)."""


def _check_optimizer(
    directory: Path, optimizer: torch.optim.Optimizer, state: dict[int, dict[str, torch.Tensor]], groups: list[Any]
) -> None:
    """The saved optimizer is this run's: the same settings (the learning rate aside: the schedule sets it each
    step) and, for every parameter it holds state of, each of AdamW's tensors in that parameter's shape."""
    where = f"checkpoint file {str(directory / STATE_FILE)!r}"
    current = optimizer.state_dict()["param_groups"]
    if len(groups) != len(current) or any(
        len(g["params"]) != len(c["params"]) for g, c in zip(groups, current, strict=False)
    ):
        raise CheckpointError(f"The optimizer in {where} has other parameter groups than this run's model.")
    for saved, mine in zip(groups, current, strict=True):
        for key, value in mine.items():
            if key not in IMPLEMENTATION_KEYS and saved.get(key) != value:
                source = OPTIMIZER_KEYS.get(key, "AdamW's default")
                raise CheckpointError(
                    f"The optimizer in {where} has {key}={saved.get(key)!r} where this run's settings give "
                    f"{value!r} ({source}): the file was changed after rllm wrote it. Resume with the settings "
                    "it was written with (a changed setting is refused by name), or start over."
                )
    params = [p for group in optimizer.param_groups for p in group["params"]]
    tensors_file = str(directory / OPTIMIZER_FILE)
    for index, entry in sorted(state.items()):
        missing = [name for name in ADAMW_STATE if name not in entry]
        if not 0 <= index < len(params) or missing:
            what = f"no tensor {missing[0]!r}" if missing else "no parameter of this run's model"
            raise CheckpointError(
                f"Checkpoint file {tensors_file!r} holds optimizer state for parameter {index} with {what}; "
                "it is incomplete."
            )
        shape = tuple(params[index].shape)
        for name in ADAMW_STATE[1:]:
            if tuple(entry[name].shape) != shape:
                raise CheckpointError(
                    f"Checkpoint file {tensors_file!r} holds {index}.{name} of shape {tuple(entry[name].shape)} "
                    f"for a parameter of shape {shape}."
                )
