"""Reducing a per-token loss matrix to a scalar by verl's aggregation modes, and checking a mode's name."""

from __future__ import annotations

from typing import Any

from rllm.contract.names import LOSS_AGG_MODES
from rllm.errors import LossOptionError
from rllm.losses.choices import one_of


def check_agg_mode(mode: Any, key: str = "loss_agg_mode", allowed: tuple[str, ...] | None = None) -> str:
    """``mode`` if it is one of the aggregation modes (of ``allowed``, a loss's own subset), else a named error."""
    return one_of(
        mode, allowed or LOSS_AGG_MODES, key, "an aggregation mode" + (" this loss supports" if allowed else "")
    )


def aggregate(
    per_token: Any,
    mask: Any,
    mode: str,
    *,
    dp_size: int = 1,
    batch_num_tokens: Any = None,
    global_batch_size: Any = None,
    loss_scale_factor: Any = None,
) -> Any:
    """A scalar from a ``(batch, tokens)`` loss matrix, with verl's semantics for each of its five modes.

    ``token-mean`` divides the masked sum by the batch's token count, ``token-sum`` keeps it;
    the ``seq-mean-*`` modes average per-sequence sums (or means) over sequences with at least
    one token, and ``seq-mean-token-sum-norm`` then divides by ``loss_scale_factor`` (default:
    the padded length). Every mode is multiplied by ``dp_size`` (ranks average gradients).
    """
    check_agg_mode(mode)
    mask = mask.to(per_token.dtype)
    if dp_size > 1 and (
        (mode == "token-mean" and batch_num_tokens is None)
        or (mode.startswith("seq-mean") and global_batch_size is None)
    ):
        needed = "batch_num_tokens" if mode == "token-mean" else "global_batch_size"
        raise LossOptionError(f"loss_agg_mode={mode!r} with dp_size={dp_size} needs the global {needed}.")
    if mode == "token-sum":
        return (per_token * mask).sum() * dp_size
    if mode == "token-mean":
        tokens = mask.sum() if batch_num_tokens is None else batch_num_tokens
        return (per_token * mask).sum() / tokens * dp_size
    counts = mask.sum(dim=-1)
    sums = (per_token * mask).sum(dim=-1)
    per_sequence = sums if mode != "seq-mean-token-mean" else sums / (counts + 1e-8)
    present = (counts > 0).to(per_token.dtype)
    sequences = present.sum() if global_batch_size is None else global_batch_size
    loss = (per_sequence * present).sum() / sequences * dp_size
    if mode == "seq-mean-token-sum-norm":
        loss = loss / (per_token.shape[-1] if loss_scale_factor is None else loss_scale_factor)
    return loss
