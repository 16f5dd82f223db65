"""Numeric conventions of the group-normalising estimators, and named presets per framework.

Frameworks disagree on the std divisor, the epsilon, and what a group of one trajectory
gets. A :class:`Numerics` pins all of them; a preset reproduces one framework's numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, Literal

import numpy as np

from rllm.errors import ConfigError

StdDivisor = Literal["population", "unbiased"]
SinglePolicy = Literal["raw", "zero"]


@dataclass(frozen=True)
class Numerics:
    """How group statistics are computed.

    ``std``: ``"population"`` divides the variance by n, ``"unbiased"`` by n - 1.
    ``eps``: added to the standard deviation before dividing.
    ``single``: a group of one trajectory keeps its raw reward (``"raw"``: mean 0, std 1)
    or gets zero advantage (``"zero"``).
    ``dtype``: ``"float64"`` or ``"float32"`` for the computation and the result.
    """

    std: StdDivisor = "population"
    eps: float = 1e-6
    single: SinglePolicy = "raw"
    dtype: str = "float64"

    def __post_init__(self) -> None:
        if self.std not in ("population", "unbiased"):
            raise ConfigError(f"std must be 'population' or 'unbiased', got {self.std!r}.")
        if self.single not in ("raw", "zero"):
            raise ConfigError(f"single must be 'raw' or 'zero', got {self.single!r}.")
        if not (isinstance(self.eps, int | float) and self.eps >= 0):
            raise ConfigError(f"eps must be a non-negative number, got {self.eps!r}.")
        if self.dtype not in ("float64", "float32"):
            raise ConfigError(f"dtype must be 'float64' or 'float32', got {self.dtype!r}.")

    @property
    def ddof(self) -> int:
        return 1 if self.std == "unbiased" else 0

    @property
    def np_dtype(self) -> np.dtype[Any]:
        return np.dtype(self.dtype)


PRESETS: dict[str, Numerics] = {
    "rllm": Numerics(std="population", eps=1e-6, single="raw"),
    "verl": Numerics(std="unbiased", eps=1e-6, single="raw"),
    "trl": Numerics(std="unbiased", eps=1e-4, single="zero"),
    "openrlhf": Numerics(std="unbiased", eps=1e-9, single="zero"),
}
"""Numeric conventions of each framework (see docs/estimators.md for the sources)."""

NUMERICS_OPTIONS = ("preset", "std", "eps", "epsilon", "episilon", "single", "dtype")
"""Keyword options every normalising built-in estimator accepts."""


def resolve_numerics(
    preset: str | None = None,
    *,
    std: StdDivisor | None = None,
    eps: float | None = None,
    epsilon: float | None = None,
    episilon: float | None = None,
    single: SinglePolicy | None = None,
    dtype: str | None = None,
) -> Numerics:
    """A preset (default ``"rllm"``) with explicit options on top.

    ``epsilon`` and the documented API's spelling ``episilon`` are accepted as aliases of ``eps``.
    """
    name = preset or "rllm"
    if name not in PRESETS:
        known = ", ".join(sorted(PRESETS))
        raise ConfigError(f"Unknown numerics preset {name!r}; choose one of: {known}.")
    chosen = [v for v in (eps, epsilon, episilon) if v is not None]
    overrides: dict[str, Any] = {"std": std, "single": single, "dtype": dtype}
    if chosen:
        overrides["eps"] = float(chosen[0])
    overrides = {k: v for k, v in overrides.items() if v is not None}
    valid = {f.name for f in fields(Numerics)}
    return replace(PRESETS[name], **{k: v for k, v in overrides.items() if k in valid})
