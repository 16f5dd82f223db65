"""Numeric conventions of the normalising estimators, and named presets per framework.

Frameworks disagree on the std divisor, the epsilon, what a group of one trajectory gets,
how a batch is whitened and in which precision all of it happens. A :class:`Numerics`
pins every one of these choices; a preset reproduces one framework's numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np

from rllm.contract.options import NUMERICS_CHOICES
from rllm.errors import ConfigError

StdDivisor = Literal["population", "unbiased"]
SinglePolicy = Literal["raw", "zero", "error"]
ZeroVariancePolicy = Literal["eps", "zero"]
WhitenMode = Literal["std", "var_add", "var_clamp"]
WhitenWeight = Literal["responses", "tokens"]


@dataclass(frozen=True)
class Numerics:
    """How group and batch statistics are computed.

    ``std``: ``"population"`` divides the variance by n, ``"unbiased"`` by n - 1.
    ``eps``: added to a group's standard deviation before dividing by it.
    ``single``: a group of one trajectory is compared with a baseline of 0 and a std of 1
    (``"raw"``), gets zero advantage (``"zero"``), or is refused (``"error"``).
    ``zero_variance``: a group whose rewards are all equal is divided by ``std + eps`` like
    any other (``"eps"``), or gets exactly zero advantage (``"zero"``; needed with ``eps=0``).
    ``dtype``: ``"float64"`` or ``"float32"`` for the computation and the result.
    ``whiten``: how a batch is whitened (REINFORCE++ and friends): ``"std"`` is
    ``x / (std + eps)``; ``"var_add"`` is ``(x - mean) / sqrt(var + whiten_eps)``;
    ``"var_clamp"`` is ``(x - mean) / sqrt(max(var, whiten_eps))``.
    ``whiten_eps`` and ``whiten_std`` default to ``eps`` and ``std``.
    ``whiten_weight``: what one value of a per-trajectory whitening counts as: one response
    (``"responses"``), or as many tokens as the response has (``"tokens"``: the batch's
    ``response_lengths`` weight the mean and the variance, whose n - 1 correction then counts
    tokens), as verl, SkyRL and OpenRLHF whiten. Without lengths ``"tokens"`` falls back to
    responses, with one warning. Per-step estimators whiten over their steps either way.
    ``preset``: the preset these numerics came from (named in messages; not compared).
    """

    std: StdDivisor = "population"
    eps: float = 1e-6
    single: SinglePolicy = "raw"
    zero_variance: ZeroVariancePolicy = "eps"
    dtype: str = "float64"
    whiten: WhitenMode = "std"
    whiten_eps: float | None = None
    whiten_std: StdDivisor | None = None
    whiten_weight: WhitenWeight = "responses"
    preset: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        for name, allowed in NUMERICS_CHOICES.items():
            value = getattr(self, name)
            if value not in allowed:
                raise ConfigError(f"{name} must be one of {', '.join(map(repr, allowed))}; got {value!r}.")
        if self.whiten_std is not None and self.whiten_std not in NUMERICS_CHOICES["std"]:
            raise ConfigError(f"whiten_std must be 'population' or 'unbiased'; got {self.whiten_std!r}.")
        for name in ("eps", "whiten_eps"):
            value = getattr(self, name)
            if value is None and name == "whiten_eps":
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
                raise ConfigError(f"{name} must be a non-negative number, got {value!r}.")

    @property
    def ddof(self) -> int:
        return 1 if self.std == "unbiased" else 0

    @property
    def np_dtype(self) -> np.dtype[Any]:
        return np.dtype(self.dtype)


_TOKEN_WHITENING: dict[str, Any] = {"whiten": "var_add", "whiten_eps": 1e-8, "whiten_weight": "tokens"}
"""verl's ``masked_whiten`` (SkyRL has a copy): over tokens, unbiased variance, 1e-8 inside the square root."""

PRESETS: dict[str, Numerics] = {
    "rllm": Numerics(std="population", eps=1e-6, single="raw", dtype="float64", preset="rllm"),
    "verl": Numerics(std="unbiased", eps=1e-6, single="raw", dtype="float32", **_TOKEN_WHITENING, preset="verl"),
    "skyrl": Numerics(std="unbiased", eps=1e-6, single="raw", dtype="float32", **_TOKEN_WHITENING, preset="skyrl"),
    "trl": Numerics(std="unbiased", eps=1e-4, single="zero", dtype="float32", preset="trl"),
    "openrlhf": Numerics(
        std="unbiased",
        eps=1e-9,
        single="zero",
        dtype="float32",
        whiten="var_clamp",
        whiten_eps=1e-8,
        whiten_std="population",
        whiten_weight="tokens",
        preset="openrlhf",
    ),
}
"""Numeric conventions of each framework (sources and caveats in docs/estimators.md)."""

ESTIMATOR_OVERRIDES: dict[tuple[str, str], dict[str, Any]] = {
    ("skyrl", "rloo"): {"single": "zero"},
    ("verl", "rloo_vectorized"): {"single": "zero"},  # verl's vectorized RLOO gives groups of one 0, its loop keeps r
}
"""Where a framework treats one estimator differently from its others: (preset, estimator) -> fields."""


def resolve_numerics(
    preset: str | None = None,
    *,
    estimator: str | None = None,
    std: StdDivisor | None = None,
    eps: float | None = None,
    epsilon: float | None = None,
    episilon: float | None = None,
    single: SinglePolicy | None = None,
    zero_variance: ZeroVariancePolicy | None = None,
    dtype: str | None = None,
    whiten: WhitenMode | None = None,
    whiten_eps: float | None = None,
    whiten_std: StdDivisor | None = None,
    whiten_weight: WhitenWeight | None = None,
) -> Numerics:
    """A preset (default ``"rllm"``), its per-``estimator`` exceptions, then explicit options on top.

    ``epsilon`` and the documented API's spelling ``episilon`` are aliases of ``eps``.
    """
    name = preset or "rllm"
    if name not in PRESETS:
        known = ", ".join(sorted(PRESETS))
        raise ConfigError(f"Unknown numerics preset {name!r}; choose one of: {known}.")
    base = replace(PRESETS[name], **ESTIMATOR_OVERRIDES.get((name, estimator or ""), {}))
    chosen = [v for v in (eps, epsilon, episilon) if v is not None]
    overrides: dict[str, Any] = {
        "std": std,
        "single": single,
        "zero_variance": zero_variance,
        "dtype": None if dtype is None else np.dtype(dtype).name,
        "whiten": whiten,
        "whiten_eps": whiten_eps,
        "whiten_std": whiten_std,
        "whiten_weight": whiten_weight,
        "eps": float(chosen[0]) if chosen else None,
    }
    return replace(base, **{k: v for k, v in overrides.items() if v is not None})
