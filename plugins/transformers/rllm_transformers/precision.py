"""``rllm.transformers.precision``: in which dtype the weights, the optimizer state and the compute are kept.

The mixed modes keep float32 master weights (so float32 gradients and AdamW state) and run the
model's forward under ``torch.autocast`` in bfloat16 or float16: an update far below a weight's
bfloat16 resolution still reaches it. ``bf16-pure`` keeps everything in bfloat16 (half the
memory of the weights and optimizer state), where AdamW's update is rounded to the weight's
precision: a step under half a unit in the last place (about 0.4% of the weight) is lost, which
at RL learning rates is most of them; it is taken only by name, with a warning saying so.
"""

from __future__ import annotations

import types
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from omegaconf import DictConfig

from rllm.errors import ConfigError, RLLMWarning
from rllm_transformers.plugin import PRECISIONS

LEGACY_DTYPES = {"float32": "fp32", "bfloat16": "bf16-pure"}
"""``rllm.transformers.dtype`` (the earlier key) as the precision it always meant: bfloat16 weights and AdamW state."""
AUTOCAST = "_rllm_autocast_dtype"
"""The attribute a model under a mixed precision carries: the dtype its forward computes in."""


@dataclass(frozen=True)
class Precision:
    """One of :data:`PRECISIONS`: the weights' dtype, the autocast dtype (None: none) and whether loss scaling runs."""

    name: str
    weights: torch.dtype
    compute: torch.dtype | None

    @property
    def scales_loss(self) -> bool:
        """float16's range is narrow: small gradients underflow without a loss scale (``torch.amp.GradScaler``)."""
        return self.compute == torch.float16

    def describe(self) -> str:
        compute = "float32" if self.compute is None else str(self.compute).removeprefix("torch.")
        weights = str(self.weights).removeprefix("torch.")
        return f"{self.name} (weights, gradients and AdamW state in {weights}, compute in {compute})"

    def prepare(self, model: torch.nn.Module, device: torch.device, place: torch.device | None = None) -> None:
        """The model's weights in :attr:`weights` on ``device`` (or on ``place``: host memory, or the meta device for
        a shape), its forward under autocast, TF32 on CUDA.

        The forward is wrapped on the instance, bound to it (so ``copy.deepcopy`` of the model, as
        the reference and the rollout copy are made, wraps the copy), as accelerate does: every door
        (sampling, ``rllm serve``, the log-prob passes, the update) computes alike.
        """
        where = device if place is None else place
        if any(p.dtype != self.weights or p.device != where for p in model.parameters()):
            model.to(device=where, dtype=self.weights)  # type: ignore[arg-type]
        if device.type == "cuda":  # float32 matmuls on tensor cores (TF32); autocast's run in its own dtype
            torch.set_float32_matmul_precision("high")
            torch.backends.cudnn.allow_tf32 = True
        if self.compute is None:
            return
        setattr(model, AUTOCAST, self.compute)
        model.forward = types.MethodType(_autocast_forward, model)  # type: ignore[method-assign]

    def grad_scaler(self, device: torch.device) -> torch.amp.GradScaler | None:
        return torch.amp.GradScaler(device.type) if self.scales_loss else None


TABLE = {
    "fp32": Precision("fp32", torch.float32, None),
    "bf16-mixed": Precision("bf16-mixed", torch.float32, torch.bfloat16),
    "fp16-mixed": Precision("fp16-mixed", torch.float32, torch.float16),
    "bf16-pure": Precision("bf16-pure", torch.bfloat16, None),
}
"""Each of :data:`PRECISIONS` (``rllm.transformers.precision``'s values)."""


def _autocast_forward(self: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
    """The class's forward under autocast in the model's compute dtype."""
    device = next(self.parameters()).device.type
    with torch.autocast(device, dtype=getattr(self, AUTOCAST)):
        return type(self).forward(self, *args, **kwargs)


def compute_dtype(model: Any, weight: torch.Tensor) -> torch.dtype:
    """The dtype ``model``'s matmuls run in: the autocast in force, the model's own (:meth:`Precision.prepare`), or
    ``weight``'s."""
    device = weight.device.type
    if torch.is_autocast_enabled(device):
        return torch.get_autocast_dtype(device)
    inner = getattr(model, "module", model)
    return getattr(inner, AUTOCAST, None) or getattr(model, AUTOCAST, None) or weight.dtype


@contextmanager
def autocast_of(model: Any, device: torch.device) -> Iterator[None]:
    """Autocast as ``model``'s forward runs it (nothing for a float32 or pure model): for work outside its forward."""
    dtype = getattr(getattr(model, "module", model), AUTOCAST, None)
    if dtype is None:
        yield
        return
    with torch.autocast(device.type, dtype=dtype):
        yield


def precision_of(options: DictConfig) -> Precision:
    """The run's precision from ``rllm.transformers.precision`` (or the earlier ``dtype``), warning for a pure one."""
    name = str(options.get("precision", PRECISIONS[0]))
    legacy = options.get("dtype")
    if legacy is not None:
        meant = LEGACY_DTYPES[str(legacy)]
        if name != PRECISIONS[0] and name != meant:
            raise ConfigError(
                f"rllm.transformers.dtype={legacy} (precision {meant}) contradicts rllm.transformers.precision={name}; "
                "set precision only (dtype is its earlier spelling)."
            )
        name = meant
    if name not in PRECISIONS:
        raise ConfigError(f"rllm.transformers.precision={name!r}: use one of {', '.join(PRECISIONS)}.")
    if name == "bf16-pure":
        warnings.warn(
            "rllm.transformers.precision=bf16-pure keeps weights and AdamW state in bfloat16: an update under half a "
            "unit in the last place of a weight (~0.4% of it) is rounded away, so at RL learning rates most weights "
            "do not move; use bf16-mixed (float32 master weights, bfloat16 compute) unless memory forces this.",
            RLLMWarning,
            stacklevel=2,
        )
    return TABLE[name]


def precision_in(model: torch.nn.Module) -> Precision:
    """The precision ``model`` was prepared in (:meth:`Precision.prepare`), for a copy built from its class elsewhere
    (a Ray worker's) to compute as it does: its weights' dtype and its forward's autocast."""
    weights = next(model.parameters()).dtype
    compute = getattr(getattr(model, "module", model), AUTOCAST, None)
    known = [p for p in TABLE.values() if p.weights == weights and p.compute == compute]
    return known[0] if known else Precision(str(weights).removeprefix("torch."), weights, compute)
