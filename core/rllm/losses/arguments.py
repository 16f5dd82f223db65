"""The checks of :func:`~rllm.losses.compute_policy_loss`'s arguments, by the rules of the config keys they mirror.

The config keys ``rllm.algorithm.kl_beta`` and ``rllm.algorithm.rollout_correction.tis_cap``
are :data:`KL_COEF` and :data:`TIS_CAP` under their dotted names, so a direct caller of the
losses API and a run's config meet one rule.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from rllm.contract.keys import ConfigKey
from rllm.errors import ConfigError, LossOptionError

KL_COEF = ConfigKey("kl_coef", "float", 0.0, "Weight of the KL penalty to the reference policy.", minimum=0)
"""The KL term's coefficient; the config key ``rllm.algorithm.kl_beta`` is this rule under its own name."""
TIS_CAP = ConfigKey("tis_cap", "float", 2.0, "Clamp of the importance weights.", minimum=0, above=True)
"""The rollout-correction cap; ``rllm.algorithm.rollout_correction.tis_cap`` is this rule."""
ENTROPY_COEFF = ConfigKey(
    "entropy_coeff", "float", 0.0, "Weight of the entropy bonus subtracted from the loss (verl's).", minimum=0
)
"""The entropy bonus's coefficient; ``rllm.algorithm.entropy_coeff`` is this rule."""


def _count(argument: str, doc: str) -> ConfigKey:
    return ConfigKey(argument, "float", None, doc, minimum=0, above=True, nullable=True)


_ARGUMENTS = {
    key.path: key
    for key in (
        KL_COEF,
        TIS_CAP,
        ENTROPY_COEFF,
        ConfigKey("dp_size", "int", 1, "Data-parallel ranks averaging gradients.", minimum=1),
        _count("batch_num_tokens", "Response tokens of the whole batch."),
        _count("global_batch_size", "Sequences of the whole batch."),
        _count("loss_scale_factor", "Divisor of seq-mean-token-sum-norm."),
        ConfigKey(
            "num_prompts", "float", None, "Prompts with a response token in the whole batch.", minimum=0, nullable=True
        ),
    )
}


def as_config_key(rule: ConfigKey, path: str) -> ConfigKey:
    """``rule`` under a config key's dotted ``path``: the key and the argument are checked alike."""
    return dataclasses.replace(rule, name=path)


def check_arguments(**arguments: Any) -> None:
    """Each argument by the rule of the config key it mirrors (``kl_coef`` is ``kl_beta``'s); one-line errors.

    A single-element tensor (verl's global token count) is taken as it is: reading it would
    wait for the device.
    """
    for name, value in arguments.items():
        if getattr(value, "numel", None) is not None:
            if value.numel() != 1:
                raise LossOptionError(f"{name} must be one number; got a tensor of shape {tuple(value.shape)}.")
            continue
        try:
            _ARGUMENTS[name].check(value.item() if hasattr(value, "item") and hasattr(value, "dtype") else value)
        except ConfigError as exc:
            raise LossOptionError(str(exc)) from None


def check_shapes(log_probs: Any, **tensors: Any) -> None:
    """``log_probs`` is ``(batch, tokens)`` and every other per-token tensor has its shape (no broadcasting)."""
    shape = tuple(getattr(log_probs, "shape", ()))
    if len(shape) != 2:
        raise LossOptionError(f"log_probs must have shape (batch, tokens); got {shape}.")
    for name, tensor in tensors.items():
        if tensor is not None and tuple(getattr(tensor, "shape", ())) != shape:
            raise LossOptionError(
                f"{name} has shape {tuple(getattr(tensor, 'shape', ()))} but log_probs has {shape}; "
                "every per-token tensor is (batch, tokens)."
            )


def check_sequence_shapes(log_probs: Any, **vectors: Any) -> None:
    """Every per-sequence tensor (``prompt_ids``, ``prompt_num_tokens``) is ``(batch,)`` for ``log_probs``'s batch."""
    rows = tuple(getattr(log_probs, "shape", ()))[:1]
    for name, vector in vectors.items():
        if vector is not None and tuple(getattr(vector, "shape", (len(vector),))) != rows:
            raise LossOptionError(
                f"{name} has shape {tuple(getattr(vector, 'shape', (len(vector),)))} but log_probs has {rows[0]} "
                f"sequences; give one value per sequence, shape ({rows[0]},)."
            )
