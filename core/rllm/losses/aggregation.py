"""Reducing a per-token loss matrix to a scalar by verl's aggregation modes, and checking a mode's name.

Masked positions are left out by selection (``where``), not multiplied by 0, so NaN or inf on
padding never reaches the loss or its gradient; counts and sums accumulate in at least float32,
so float16 batches of more than 65,504 tokens do not overflow. A batch without a response token
(or a sequence without one) has loss 0 with gradient 0. Every mode divides by a count of the
*whole* batch when given one (``batch_num_tokens``, ``global_batch_size``; for ``prompt-mean``,
``prompt_num_tokens`` and ``num_prompts``), so the losses of a batch's micro-batches add up to
the loss of the batch.
"""

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


def _needs_global(dp_size: int, value: Any, mode: str, needed: str) -> None:
    if dp_size > 1 and value is None:
        raise LossOptionError(f"loss_agg_mode={mode!r} with dp_size={dp_size} needs the global {needed}.")


def _accumulating(values: Any) -> Any:
    """The dtype sums and counts of ``values`` accumulate in: theirs, at least float32."""
    import torch

    return torch.promote_types(values.dtype, torch.float32) if values.is_floating_point() else torch.float32


def mean_over_sequences(
    per_sequence: Any, mask: Any, *, dp_size: int = 1, global_batch_size: Any = None, mode: str = "seq-mean-token-mean"
) -> Any:
    """The mean of per-sequence losses over the batch's sequences with a response token, times ``dp_size``.

    The divisor is ``global_batch_size`` when given (the whole batch's count, so micro-batches
    add up), else this batch's count of sequences with a token; with none, the loss is 0.
    """
    import torch

    _needs_global(dp_size, global_batch_size, mode, "global_batch_size")
    present = mask.bool().any(dim=-1)
    dtype = _accumulating(per_sequence)
    total = torch.where(present, per_sequence, 0.0).sum(dtype=dtype)
    sequences = present.sum(dtype=dtype).clamp(min=1) if global_batch_size is None else global_batch_size
    return total / sequences * dp_size


def prompt_counts(mask: Any, prompt_ids: Any) -> tuple[Any, Any]:
    """Each sequence's prompt's response tokens in ``mask``, and the number of prompts with a token.

    ``prompt_ids`` ``(batch,)`` says which prompt each sequence answers (any integers); what a
    caller passes as ``prompt_num_tokens`` and ``num_prompts`` when the batch is split.
    """
    import torch

    tokens = mask.bool().sum(dim=-1, dtype=_accumulating(mask))
    _, which = torch.unique(torch.as_tensor(prompt_ids, device=tokens.device), return_inverse=True)
    per_prompt = torch.zeros(int(which.max()) + 1 if len(which) else 0, dtype=tokens.dtype, device=tokens.device)
    per_prompt = per_prompt.index_add(0, which, tokens)
    return per_prompt[which], (per_prompt > 0).sum(dtype=tokens.dtype)


def _prompt_mean(
    sums: Any, mask: Any, mode: str, dp_size: int, prompt_ids: Any, prompt_num_tokens: Any, num_prompts: Any
) -> Any:
    """The mean over prompts of each prompt's token-mean (SkyRL's ``prompt_mean``), times ``dp_size``."""
    import torch

    if (prompt_num_tokens is None) != (num_prompts is None):
        raise LossOptionError(f"loss_agg_mode={mode!r}: give prompt_num_tokens and num_prompts together.")
    if prompt_num_tokens is None:
        if prompt_ids is None:
            raise LossOptionError(
                f"loss_agg_mode={mode!r} needs prompt_ids (the prompt each sequence answers), or the whole "
                "batch's prompt_num_tokens and num_prompts."
            )
        _needs_global(dp_size, None, mode, "prompt_num_tokens and num_prompts")
        prompt_num_tokens, num_prompts = prompt_counts(mask, prompt_ids)
    prompts = num_prompts.clamp(min=1) if hasattr(num_prompts, "clamp") else max(float(num_prompts), 1.0)
    per_sequence = sums / torch.as_tensor(prompt_num_tokens, device=sums.device).to(sums.dtype).clamp(min=1)
    return per_sequence.sum() / prompts * dp_size


def aggregate(
    per_token: Any,
    mask: Any,
    mode: str,
    *,
    dp_size: int = 1,
    batch_num_tokens: Any = None,
    global_batch_size: Any = None,
    loss_scale_factor: Any = None,
    prompt_ids: Any = None,
    prompt_num_tokens: Any = None,
    num_prompts: Any = None,
) -> Any:
    """A scalar from a ``(batch, tokens)`` loss matrix, with verl's semantics for each of its five modes.

    ``token-mean`` divides the masked sum by the batch's token count, ``token-sum`` keeps it;
    the ``seq-mean-*`` modes average per-sequence sums (or means) over sequences with at least
    one token, and ``seq-mean-token-sum-norm`` then divides by ``loss_scale_factor`` (default:
    the padded length). ``prompt-mean`` (SkyRL's) takes each prompt's token-mean over its
    sequences (``prompt_ids``) and averages them over the prompts with a token, so every prompt
    weighs alike whatever its responses' lengths. Every mode is multiplied by ``dp_size``
    (ranks average gradients).
    """
    import torch

    check_agg_mode(mode)
    selected = mask.bool()
    dtype = _accumulating(per_token)
    masked = torch.where(selected, per_token, 0.0).to(dtype)
    if mode == "prompt-mean":
        return _prompt_mean(masked.sum(dim=-1), mask, mode, dp_size, prompt_ids, prompt_num_tokens, num_prompts)
    if mode == "token-sum":
        return masked.sum() * dp_size
    if mode == "token-mean":
        _needs_global(dp_size, batch_num_tokens, mode, "batch_num_tokens")
        tokens = selected.sum(dtype=dtype).clamp(min=1) if batch_num_tokens is None else batch_num_tokens
        return masked.sum() / tokens * dp_size
    sums = masked.sum(dim=-1)
    if mode == "seq-mean-token-mean":
        sums = sums / selected.sum(dim=-1, dtype=dtype).clamp(min=1)
    loss = mean_over_sequences(sums, selected, dp_size=dp_size, global_batch_size=global_batch_size, mode=mode)
    if mode == "seq-mean-token-sum-norm":
        loss = loss / (per_token.shape[-1] if loss_scale_factor is None else loss_scale_factor)
    return loss
