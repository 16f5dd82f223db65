"""Composition: an estimator that is a weighted sum of registered estimators (``mix``)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from rllm import get_estimator
from rllm.errors import ConfigError, EstimatorOptionError
from rllm.toolkit import AdvantageBatch, FloatArray, Ragged, run_estimator, state_factory

_NUMBER = r"(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_TERM = re.compile(rf"\s*([+-])?\s*(?:({_NUMBER})\s*\*\s*)?([A-Za-z_][\w.]*)\s*")


def parse_components(components: str | Mapping[str, Any]) -> list[tuple[str, float, dict[str, Any]]]:
    """``(name, weight, options)`` per component, from ``"0.7*grpo + 0.3*rloo"`` or a mapping.

    A mapping value is a weight, or a mapping with ``weight`` plus options for that
    component alone, e.g. ``{grpo: {weight: 0.5, preset: verl}, rloo: 0.5}``.
    """
    parsed: list[tuple[str, float, dict[str, Any]]] = []
    if isinstance(components, str):
        position = 0
        while position < len(components):
            match = _TERM.match(components, position)
            if match is None or match.end() == position or (parsed and match.group(1) is None):
                raise ConfigError(
                    f"Cannot read the composition {components!r} at position {position}; write it as "
                    "'weight*name + weight*name', e.g. '0.7*grpo + 0.3*rloo'."
                )
            sign, weight, name = match.groups()
            value = 1.0 if weight is None else float(weight)
            parsed.append((name, -value if sign == "-" else value, {}))
            position = match.end()
    elif isinstance(components, Mapping):
        for name, spec in components.items():
            if isinstance(spec, Mapping):
                options = dict(spec)
                weight = options.pop("weight", 1.0)
            else:
                weight, options = spec, {}
            if isinstance(weight, bool) or not isinstance(weight, int | float):
                raise ConfigError(f"Component {name!r} of 'mix' has weight {weight!r}; weights are numbers.")
            parsed.append((str(name), float(weight), options))
    else:
        raise ConfigError(
            f"'mix' needs components as a mapping {{name: weight}} or a string like '0.7*grpo + 0.3*rloo', "
            f"got {type(components).__name__}."
        )
    if not parsed:
        raise ConfigError("'mix' needs at least one component, e.g. components='0.7*grpo + 0.3*rloo'.")
    return parsed


def mix(
    batch: AdvantageBatch, *, components: str | Mapping[str, Any] | None = None, **shared: Any
) -> FloatArray | Ragged:
    """Weighted sum of registered estimators: ``A_i = sum_k w_k A_i^(k)`` (e.g. ``0.7*grpo + 0.3*rloo``).

    ``components`` names the estimators and weights (see :func:`parse_components`). The
    numerics options and ``norm_adv_by_std_in_grpo`` given to ``mix`` reach every component
    that declares them; a component's own options override them. When one component gives
    per-step advantages, the per-trajectory ones are copied to every step before summing.
    """
    if components is None:
        raise ConfigError(
            "Estimator 'mix' needs its components, e.g. estimator_options: {mix: {components: '0.7*grpo + 0.3*rloo'}}."
        )
    ambient = {k: v for k, v in shared.items() if v is not None}
    terms = parse_components(components)
    if any(name == "mix" for name, _, _ in terms):
        raise ConfigError("'mix' cannot be one of its own components; list the estimators it mixes instead.")
    for name, _, _ in terms:  # mix gets no state to hand on, and a fresh one every step would be a silent reset
        entry = get_estimator(name)
        if state_factory(entry.target) is not None:
            raise EstimatorOptionError(
                f"Estimator {entry.name!r} ({entry.source.describe()}) keeps state across training steps, which "
                "'mix' cannot carry; use it as the run's estimator on its own, not as a component of 'mix'."
            )
    parts = [(weight, run_estimator(name, batch, options, ambient=ambient)) for name, weight, options in terms]
    rows = next((part for _, part in parts if isinstance(part, Ragged)), None)
    if rows is None:
        return sum((weight * np.asarray(part, dtype=np.float64) for weight, part in parts), np.zeros(len(batch)))
    per_step = (part.values if isinstance(part, Ragged) else rows.expand(part) for _, part in parts)
    return rows.with_values(sum((w * v for (w, _), v in zip(parts, per_step, strict=True)), np.zeros(len(rows.values))))
