"""rllm's row batch as verl's worker batch, and verl's per-response tensors back as rllm's per-position ones.

rllm packs each step (or each multi-turn trajectory whose prompts extend one another) into one
right-padded row of ``ids``; ``mask[r, j]`` is 1 where token ``j + 1`` is a response token, so
it lines up with the log-prob the model gives at position ``j``. verl's worker takes a left-padded
``prompts`` block and a right-padded ``responses`` block: here the prompt is a row's tokens before
its first response token, and the response everything after (observation tokens of later turns
included, with ``response_mask`` 0), which is verl's own multi-turn layout. DP padding repeats the
first row with an empty ``response_mask`` until the rows divide among the ranks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from rllm.errors import TrainerError


@dataclass(frozen=True)
class Layout:
    """Where each row's response block sits in rllm's positions: it starts at ``prompt_lengths[r] - 1``."""

    prompt_lengths: torch.Tensor
    response_lengths: torch.Tensor
    width: int
    """rllm's positions per row (``ids.shape[1] - 1``)."""
    rows: int
    """The real rows; the blocks may carry DP padding rows after them."""


def layout_of(attention: torch.Tensor, mask: torch.Tensor) -> Layout:
    """Each row's prompt length (up to its first response token) and response length (the rest of the row)."""
    lengths = attention.sum(1)
    has_response = mask.bool().any(1)
    if not bool(has_response.all()):
        empty = int((~has_response).nonzero()[0])
        raise TrainerError(f"Row {empty} of the batch has no response token; verl's worker needs one in every row.")
    first = mask.bool().int().argmax(1)
    prompt_lengths = first + 1
    return Layout(prompt_lengths, lengths - prompt_lengths, int(mask.shape[1]), int(mask.shape[0]))


def _responses(values: torch.Tensor, layout: Layout, width: int) -> torch.Tensor:
    """Each row's values from its response start, right-padded with zeros to ``width``."""
    out = values.new_zeros((values.shape[0], width))
    for row in range(values.shape[0]):
        start, count = int(layout.prompt_lengths[row]) - 1, int(layout.response_lengths[row])
        out[row, :count] = values[row, start : start + count]
    return out


def verl_fields(
    prompts: torch.Tensor,
    prompt_attention: torch.Tensor,
    responses: torch.Tensor,
    response_attention: torch.Tensor,
    response_mask: torch.Tensor,
) -> dict[str, torch.Tensor]:
    """verl's sequence fields of left-padded prompts and right-padded responses: the joined ids, attention and
    positions (counted over the attended tokens), with the blocks themselves and the response mask."""
    attention = torch.cat([prompt_attention, response_attention], 1)
    return {
        "prompts": prompts,
        "responses": responses,
        "input_ids": torch.cat([prompts, responses], 1),
        "attention_mask": attention,
        "position_ids": (attention.cumsum(1) - 1).clamp(min=0),
        "response_mask": response_mask,
    }


def to_verl_batch(
    ids: torch.Tensor,
    attention: torch.Tensor,
    mask: torch.Tensor,
    per_token: Mapping[str, torch.Tensor],
    pad_id: int,
    multiple: int = 1,
) -> tuple[dict[str, torch.Tensor], Layout]:
    """verl's left/right-padded batch (``prompts``, ``responses``, ``input_ids``, masks, positions, the per-token
    fields given by verl's names) and the layout that maps verl's response tensors back; its rows padded to a
    ``multiple`` (the ranks times the rows of a micro-batch)."""
    layout = layout_of(attention, mask)
    extra = (-layout.rows) % multiple
    if extra:  # DP padding: copies of row 0 that carry no loss
        pick = torch.cat([torch.arange(layout.rows), torch.zeros(extra, dtype=torch.long)])
        ids, attention = ids[pick], attention[pick]
        mask = torch.cat([mask, mask.new_zeros((extra, mask.shape[1]))])
        mask[layout.rows :] = 0
        # zeros on the padding rows: a field may be the loss's own mask (rollout rejection's), which must stay empty
        per_token = {
            name: torch.cat([value, value.new_zeros((extra, *value.shape[1:]))]) for name, value in per_token.items()
        }
        padded = Layout(layout.prompt_lengths[pick], layout.response_lengths[pick], layout.width, layout.rows + extra)
    else:
        padded = layout
    rows = padded.rows
    prompt_width = int(padded.prompt_lengths.max())
    response_width = int(padded.response_lengths.max())
    prompts = ids.new_full((rows, prompt_width), pad_id)
    prompt_attention = attention.new_zeros((rows, prompt_width))
    responses = ids.new_full((rows, response_width), pad_id)
    response_attention = attention.new_zeros((rows, response_width))
    for row in range(rows):
        p, n = int(padded.prompt_lengths[row]), int(padded.response_lengths[row])
        prompts[row, prompt_width - p :] = ids[row, :p]
        prompt_attention[row, prompt_width - p :] = 1
        responses[row, :n] = ids[row, p : p + n]
        response_attention[row, :n] = 1
    batch = verl_fields(
        prompts, prompt_attention, responses, response_attention, _responses(mask, padded, response_width)
    )
    batch.update({name: _responses(value, padded, response_width) for name, value in per_token.items()})
    return batch, padded


def from_responses(values: torch.Tensor, layout: Layout) -> torch.Tensor:
    """verl's per-response tensor (rows x response width) at rllm's positions (rows x ``layout.width``), 0 elsewhere."""
    out = values.new_zeros((layout.rows, layout.width))
    for row in range(layout.rows):
        start, count = int(layout.prompt_lengths[row]) - 1, int(layout.response_lengths[row])
        out[row, start : start + count] = values[row, :count]
    return out
