"""Stage 4 of the transformers backend: every step one right-padded row, and the log-probs of a row batch.

:func:`pack_rows` turns the trajectory groups into a :class:`RowBatch`; the backend's stages 5
and 7 read it (``token_log_probs`` for the old, reference and current policies).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from numbers import Integral
from typing import Any

import torch

from rllm.errors import TrainerError, WorkflowError
from rllm.losses import prompt_counts
from rllm.types import Episode, Step, TrajectoryGroup


@dataclass(frozen=True)
class MiniBatchTotals:
    """A mini-batch's counts for its micro-batches' losses: tokens, rows and prompts (``loss_agg_mode``'s divisors)."""

    tokens: torch.Tensor
    rows: int
    prompt_tokens: torch.Tensor
    """For every row of the batch, its prompt's counted tokens in this mini-batch (0 outside it)."""
    prompts: torch.Tensor


@dataclass
class RowBatch:
    """Stage 4's batch: one right-padded row per step, the response tokens marked in ``mask``.

    ``mask[r, j]`` is 1 where token ``j + 1`` of row ``r`` is a response token, so it lines up
    with the log-prob the model gives at position ``j``.
    """

    ids: torch.Tensor
    attention: torch.Tensor
    mask: torch.Tensor
    rollout_logps: torch.Tensor
    steps: list[Step]
    roles: list[str]
    losses: list[str]
    prompts: torch.Tensor
    """Each row's trajectory group (its prompt, for ``loss_agg_mode=prompt-mean``), an index."""
    old_logps: torch.Tensor | None = None
    ref_logps: torch.Tensor | None = None
    counted: torch.Tensor | None = None
    """The response tokens the loss's normalisers count (rollout rejection removes some); None: all of ``mask``."""

    def put_on_steps(self, fields: Mapping[str, torch.Tensor]) -> None:
        """Each per-token tensor's values on its step's response tokens, as ``step.info[name]`` (stage 6 reads them)."""
        for name, tensor in fields.items():
            for row, step in enumerate(self.steps):
                step.info[name] = tensor[row][self.mask[row] > 0].tolist()

    def totals(self, mini: torch.Tensor) -> MiniBatchTotals:
        """The counts a mini-batch's loss divides by, over all its rows (every rank alike)."""
        counted = (self.mask if self.counted is None else self.counted)[mini]
        of_prompt = torch.zeros(len(self.steps), device=counted.device)
        tokens, prompts = prompt_counts(counted, self.prompts[mini])
        of_prompt[mini] = tokens.to(of_prompt.dtype)
        return MiniBatchTotals(counted.sum().clamp(min=1), len(mini), of_prompt, prompts)

    def advantages(self) -> torch.Tensor:
        values = torch.zeros_like(self.mask)
        for row, step in enumerate(self.steps):
            if step.advantage is None:
                raise TrainerError("A step reached the policy update without an advantage; stage 6 did not run.")
            positions = self.mask[row].nonzero().squeeze(-1)
            per_token = torch.as_tensor(step.advantage, dtype=values.dtype).reshape(-1)
            if per_token.numel() not in (1, len(positions)):
                raise TrainerError(
                    f"A step has {per_token.numel()} advantages for {len(positions)} response tokens; give one "
                    "per token or a single one."
                )
            values[row, positions] = per_token.to(values.device)
        return values


def response_tokens(episodes: Sequence[Episode]) -> int:
    """The response tokens of the episodes' steps: what was generated for them, in this process or a worker."""
    return sum(len(step.response_ids) for ep in episodes for trajectory in ep.trajectories for step in trajectory.steps)


def token_log_probs(
    model: Any, ids: torch.Tensor, attention: torch.Tensor, entropy_grad: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-prob of each next token of ``ids`` and the entropy of each position's distribution.

    The entropy carries a gradient only with ``entropy_grad`` (an entropy bonus in the loss).
    """
    chosen, entropy, _ = token_statistics(model, ids, attention, entropy_grad)
    return chosen, entropy


def token_statistics(
    model: Any, ids: torch.Tensor, attention: torch.Tensor, entropy_grad: bool = False
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`token_log_probs` and each position's sum of squared probabilities (verl's ``sum_pi_squared``)."""
    logits = model(input_ids=ids, attention_mask=attention).logits[:, :-1].float()
    log_p = torch.log_softmax(logits, dim=-1)
    chosen = log_p.gather(-1, ids[:, 1:, None]).squeeze(-1)
    with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
        p = log_p.exp()
        entropy = -(p * log_p).sum(-1)
    with torch.no_grad():
        sum_squares = (p.detach() ** 2).sum(-1)
    return chosen, entropy, sum_squares


def pack_rows(
    groups: Sequence[TrajectoryGroup],
    loss_of: Mapping[str, str],
    pad: int,
    device: torch.device,
    vocab_size: int,
    workflow: str = "the workflow",
) -> RowBatch:
    """One row per step with a response (``pad`` after it), each row's role and the name of its role's loss.

    A token id outside ``0 .. vocab_size - 1`` is a :class:`WorkflowError` naming ``workflow``,
    the id and its group, not an index error inside the model's embedding.
    """
    rows: list[tuple[list[int], list[int], list[float]]] = []
    steps, roles, losses, prompts = [], [], [], []
    for index, group in enumerate(groups):
        loss = loss_of[group.group_role]
        for trajectory in group.trajectories:
            for step in trajectory.steps:
                if not step.response_ids:
                    continue
                for part, ids in (("prompt", step.prompt_ids), ("response", step.response_ids)):
                    bad = next((i for i in ids if not (isinstance(i, Integral) and 0 <= i < vocab_size)), None)
                    if bad is not None:
                        raise WorkflowError(
                            f"{workflow} produced token id {bad!r} in the {part} of a step of group "
                            f"{group.group_id!r} (trajectory {trajectory.name!r}), outside the model's vocabulary "
                            f"(ids 0 to {vocab_size - 1}); encode with the run's tokenizer."
                        )
                logps = list(step.logprobs) if step.logprobs else [math.nan] * len(step.response_ids)
                rows.append((list(step.prompt_ids), list(step.response_ids), logps))
                steps.append(step)
                roles.append(group.group_role)
                losses.append(loss)
                prompts.append(index)
    if not rows:
        raise TrainerError("The trajectory groups hold no response tokens; the workflow produced empty steps.")
    width = max(len(p) + len(r) for p, r, _ in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    mask = torch.zeros((len(rows), width - 1))
    rollout = torch.zeros((len(rows), width - 1))
    for row, (prompt, response, logps) in enumerate(rows):
        ids[row, : len(prompt) + len(response)] = torch.tensor(prompt + response)
        attention[row, : len(prompt) + len(response)] = 1
        span = slice(len(prompt) - 1, len(prompt) - 1 + len(response))
        mask[row, span] = 1.0
        rollout[row, span] = torch.tensor(logps[: len(response)], dtype=torch.float32)
    return RowBatch(
        ids.to(device),
        attention.to(device),
        mask.to(device),
        rollout.to(device),
        steps,
        roles,
        losses,
        torch.tensor(prompts, device=device),
    )
