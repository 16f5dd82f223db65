"""The checks of :func:`~rllm.losses.compute_policy_loss`'s arguments, by the rules of the config keys they mirror.

``kl_coef`` is checked as ``rllm.algorithm.kl_beta`` is, ``tis_cap`` as
``rllm.algorithm.rollout_correction.tis_cap``: the schema's own keys, so a direct caller of the
losses API and a run's config meet one rule.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from rllm.errors import ConfigError, LossOptionError


@functools.cache
def _argument_keys() -> dict[str, Any]:
    """The rules of the arguments that mirror config keys: the schema's own keys, named by the argument."""
    from rllm.contract.keys import ConfigKey
    from rllm.config.schema import CORE_KEYS

    schema = {key.path: key for key in CORE_KEYS}

    def same_as(path: str, argument: str) -> Any:
        return dataclasses.replace(schema[path], path=argument)

    def count(argument: str, doc: str) -> Any:
        return ConfigKey(argument, "float", None, doc, minimum=0, above=True, nullable=True)

    return {
        "kl_coef": same_as("rllm.algorithm.kl_beta", "kl_coef"),
        "tis_cap": same_as("rllm.algorithm.rollout_correction.tis_cap", "tis_cap"),
        "dp_size": ConfigKey("dp_size", "int", 1, "data-parallel ranks averaging gradients", minimum=1),
        "batch_num_tokens": count("batch_num_tokens", "response tokens of the whole batch"),
        "global_batch_size": count("global_batch_size", "sequences of the whole batch"),
        "loss_scale_factor": count("loss_scale_factor", "divisor of seq-mean-token-sum-norm"),
    }


def check_arguments(**arguments: Any) -> None:
    """Each argument by the rule of the config key it mirrors (``kl_coef`` is ``kl_beta``'s); one-line errors.

    A single-element tensor (verl's global token count) is taken as it is: reading it would
    wait for the device.
    """
    keys = _argument_keys()
    for name, value in arguments.items():
        if getattr(value, "numel", None) is not None:
            if value.numel() != 1:
                raise LossOptionError(f"{name} must be one number; got a tensor of shape {tuple(value.shape)}.")
            continue
        try:
            keys[name].check(value.item() if hasattr(value, "item") and hasattr(value, "dtype") else value)
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
