"""Weights loaded into a live model are checked whole before any tensor is copied.

``torch.nn.Module.load_state_dict`` copies every matching tensor and only then raises for a
missing key or another shape, which leaves the model a mix of two: a refused update must leave
the weights as they were. Every door that loads a state dict into a model that is in use
(``rllm serve``'s weight routes, a checkpoint's resume, the rollout copy's refresh) goes
through :func:`load_checked`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

__all__ = ["load_checked", "weights_problem"]


def weights_problem(model: torch.nn.Module, state: Mapping[str, Any]) -> str | None:
    """What makes ``state`` unfit for ``model`` (the first key missing, extra, of another shape or dtype, or with a
    NaN or infinite value), or None when every tensor fits."""
    expected = model.state_dict()
    missing = [name for name in expected if name not in state]
    if missing:
        return f"key {missing[0]!r} is missing ({len(missing)} of the model's {len(expected)} keys are)"
    extra = [name for name in state if name not in expected]
    if extra:
        return f"key {str(extra[0])!r} is not one of the model's ({len(extra)} extra keys)"
    for name, target in expected.items():
        tensor = state[name]
        if not isinstance(tensor, torch.Tensor):
            return f"key {name!r} holds a {type(tensor).__name__}, not a tensor"
        if tuple(tensor.shape) != tuple(target.shape):
            return f"key {name!r} is of another shape, {tuple(tensor.shape)} where the model's is {tuple(target.shape)}"
        if tensor.dtype != target.dtype:
            return f"key {name!r} is {tensor.dtype}, the model's is {target.dtype}"
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            return f"key {name!r} holds NaN or infinite values"
    return None


def load_checked(model: torch.nn.Module, state: Mapping[str, Any], refuse: Callable[[str], Exception]) -> None:
    """Copy ``state`` into ``model`` if :func:`weights_problem` finds nothing; else raise ``refuse(problem)`` with the
    model untouched."""
    problem = weights_problem(model, state)
    if problem is not None:
        raise refuse(problem)
    with torch.no_grad():
        model.load_state_dict(state)  # strict, and nothing is left that could fail half-way
