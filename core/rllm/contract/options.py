"""The option tables every estimator shares: numerics options and presets, run-level settings, context names."""

from __future__ import annotations

from rllm.contract.keys import Option

NUMERICS_CHOICES: dict[str, tuple[str, ...]] = {
    "std": ("population", "unbiased"),
    "single": ("raw", "zero", "error"),
    "zero_variance": ("eps", "zero"),
    "dtype": ("float64", "float32"),
    "whiten": ("std", "var_add", "var_clamp"),
    "whiten_weight": ("responses", "tokens"),
}
"""The one table of the numerics choices: ``Numerics`` checks against it and the options below offer it
(the ``Literal`` types of :mod:`rllm.estimators.numerics` are tied to it by a test)."""

PRESET_NAMES = ("rllm", "verl", "skyrl", "trl", "openrlhf")
"""The numerics presets (``rllm.estimators.numerics.PRESETS`` holds one per name), for the layers below it."""

NUMERICS_OPTIONS: tuple[Option, ...] = (
    Option("preset", (str,), None, f"numeric conventions of a framework: {', '.join(PRESET_NAMES)}"),
    Option("std", (str,), None, "divide the variance by n (population) or n - 1 (unbiased)", NUMERICS_CHOICES["std"]),
    Option("eps", (float,), None, "added to the standard deviation before dividing by it", minimum=0.0),
    Option("epsilon", (float,), None, "alias of eps", minimum=0.0),
    Option("episilon", (float,), None, "alias of eps (the documented API's spelling)", minimum=0.0),
    Option(
        "single",
        (str,),
        None,
        "a group of one trajectory: raw (mean 0, std 1), zero, or error",
        NUMERICS_CHOICES["single"],
    ),
    Option(
        "zero_variance",
        (str,),
        None,
        "a group whose rewards are all equal: eps (divide by eps) or zero",
        NUMERICS_CHOICES["zero_variance"],
    ),
    Option("dtype", (str,), None, "precision of the computation and the result", NUMERICS_CHOICES["dtype"]),
    Option("whiten", (str,), None, "batch whitening: std, var_add or var_clamp", NUMERICS_CHOICES["whiten"]),
    Option("whiten_eps", (float,), None, "epsilon of batch whitening (default: eps)", minimum=0.0),
    Option("whiten_std", (str,), None, "std divisor of batch whitening (default: std)", NUMERICS_CHOICES["std"]),
    Option(
        "whiten_weight",
        (str,),
        None,
        "whitening counts each response once (responses) or once per token (tokens)",
        NUMERICS_CHOICES["whiten_weight"],
    ),
)
"""Options of every estimator registered with ``numerics=True``; resolved into one ``Numerics``."""

NUMERICS_NAMES = frozenset(option.name for option in NUMERICS_OPTIONS)

CONFIG_OPTIONS: tuple[Option, ...] = (
    Option("norm_adv_by_std_in_grpo", (bool,), True, "divide by the group std (GRPO family)"),
    Option("gamma", (float,), 1.0, "discount of per-step returns", minimum=0.0),
    Option("lam", (float,), 0.95, "GAE lambda", minimum=0.0),
    Option("epsilon", (float,), None, "std guard; null keeps the estimator's default", minimum=0.0),
    Option("preset", (str,), None, "numeric conventions of a framework, for every estimator that has numerics"),
)
"""Run-configuration settings offered to every estimator; each receives those it declares.

A caller may pass them at any door (``norm_adv_by_std_in_grpo=False`` to RLOO is not an error,
as in the documented API), but their types are always checked.
"""

CONFIG_NAMES = frozenset(option.name for option in CONFIG_OPTIONS)

CONTEXT_NAMES: tuple[str, ...] = ("algorithm_config", "traj_groups")
"""What the collection step hands an estimator besides rewards: the run's ``AlgorithmConfig`` and the
role's ``TrajectoryGroup`` list aligned with the groups (rLLM's current estimator contract)."""
