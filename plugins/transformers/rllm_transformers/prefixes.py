"""Rows that begin with the same tokens (a task's rollouts) run those tokens once, through a KV cache.

GRPO's ``n`` rollouts of a prompt share it: :func:`forward_shared` runs each distinct prompt
once and only the rest of each row per row, for the log-prob passes of
:func:`~rllm_transformers.logprobs.score_tokens`; :func:`shares_prefixes` says where that is
allowed and worth a second call of the model.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import DynamicCache


def shares_prefixes(model: Any, rows: int, width: int, start: int) -> bool:
    """Whether rows may run their first ``start`` tokens once per distinct prefix (:func:`forward_shared`).

    Not under DDP or FSDP (one forward per backward), activation checkpointing (no cache in the
    forward) or active dropout (each row's prefix would share one mask); nor where even one
    prefix for all the rows would not halve the positions run.
    """
    if start < 1 or _more_than_half(1, rows, width, start):  # the data's test first: the model's are slower
        return False
    if hasattr(model, "module") or getattr(model, "is_gradient_checkpointing", False):
        return False
    if not model.training:
        return True
    config = getattr(model, "config", None)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    if float(getattr(text, "attention_dropout", 0.0) or 0.0) > 0:
        return False
    return not any(isinstance(m, torch.nn.Dropout) and m.p > 0 for m in model.modules())


def _more_than_half(prefixes: int, rows: int, width: int, start: int) -> bool:
    """Whether ``prefixes`` distinct prefixes run once and the rest per row are over half of ``rows`` x ``width``."""
    return 2 * (prefixes * start + rows * (width - start)) > rows * width


def forward_shared(model: Any, ids: torch.Tensor, attention: torch.Tensor, start: int) -> bool:
    """The forward of ``ids`` for :func:`~rllm_transformers.logprobs.score_tokens`, its output layer's input
    captured by the caller's hook.

    The batch's rows are right-padded from column 0, so each attends to all of its first
    ``start`` tokens: rows that hold the same ones (a task's rollouts) run them once, with a KV
    cache whose rows are then copied to every row that shares them (gradients flow back through
    the copy), and only the rest of each row runs per row: GRPO's n rollouts of a prompt cost
    one prompt's forward. Each position's arithmetic is the full forward's, up to rounding. False
    (nothing run) where a row is padded before ``start`` or this would not halve the positions
    run (short prompts, few rows alike).
    """
    if not bool(attention[:, :start].all()):
        return False
    prefixes, copies = distinct_rows(ids[:, :start])
    if _more_than_half(len(prefixes), *ids.shape, start):
        return False  # under half the positions saved: not worth a second call of the model
    cache = DynamicCache(config=model.config)
    ones = torch.ones_like(prefixes)
    model(input_ids=prefixes, attention_mask=ones, past_key_values=cache, use_cache=True, logits_to_keep=1)
    cache.reorder_cache(copies)
    keep = torch.arange(0, ids.shape[1] - start, device=ids.device)  # the rest's positions
    rest = ids[:, start:]
    model(input_ids=rest, attention_mask=attention, past_key_values=cache, use_cache=True, logits_to_keep=keep)
    return True


ROW_HASH_BASE = 1_000_003
"""Column j of a row is weighted by this number to the power j (in int64, wrapping) in :func:`distinct_rows`'s keys."""


def distinct_rows(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The distinct rows of a 2-D integer tensor and, for each row, the index of its copy among them.

    ``torch.unique(dim=0)``'s result up to the order of the distinct rows, from a 1-D unique of
    one key per row (its ids weighted by powers of :data:`ROW_HASH_BASE`): on the CPU the
    row-wise unique ran a ``select`` per element (0.44 ms for 128 rows of 2 ids, a sixth of the
    forward it saved). Rows whose keys collide are told apart by comparing them, falling back
    to the row-wise unique, so the result never merges different rows.
    """
    count, width = rows.shape
    weights = torch.full((width,), ROW_HASH_BASE, dtype=torch.int64, device=rows.device).cumprod(0)
    keys = (rows.to(torch.int64) * weights).sum(1)
    _, inverse = torch.unique(keys, return_inverse=True)
    first = torch.full((int(inverse.max()) + 1,), count, dtype=torch.long, device=rows.device)
    first = first.scatter_reduce(0, inverse, torch.arange(count, device=rows.device), "amin")
    distinct = rows[first]
    if bool((distinct[inverse] == rows).all()):
        return distinct, inverse
    return torch.unique(rows, dim=0, return_inverse=True)
