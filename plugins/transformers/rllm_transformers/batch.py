"""Stage 4 of the transformers backend: the steps as right-padded rows, and the log-probs of a row batch.

:func:`pack_rows` turns the trajectory groups into a :class:`RowBatch`; the backend's stages 5
and 7 read it (:func:`rllm_transformers.logprobs.score_tokens` for the old, reference and current policies).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from numbers import Integral
from typing import Any

import numpy as np
import torch

from rllm.errors import TrainerError, WorkflowError
from rllm.losses import prompt_counts
from rllm.types import Episode, Step, Trajectory, TrajectoryGroup
from rllm_transformers.logprobs import score_tokens


@dataclass(frozen=True)
class MiniBatchTotals:
    """A mini-batch's counts for its micro-batches' losses: tokens, rows and prompts (``loss_agg_mode``'s divisors)."""

    tokens: torch.Tensor
    rows: int
    prompt_tokens: torch.Tensor
    """For every row of the batch, its prompt's counted tokens in this mini-batch (0 outside it)."""
    prompts: torch.Tensor


@dataclass(frozen=True)
class Span:
    """Where one step's response tokens sit: row ``row``, log-prob positions ``start`` to ``stop``."""

    row: int
    start: int
    stop: int


@dataclass
class RowBatch:
    """Stage 4's batch: right-padded rows, the response tokens marked in ``mask``.

    A row is one step, or the consecutive steps of a trajectory whose every prompt extends the
    previous step's prompt and response token for token (a multi-turn conversation): the
    observation tokens between the responses are in the row with mask 0, so the turns cost
    one forward pass. ``mask[r, j]`` is 1 where token ``j + 1`` of row ``r`` is a response
    token, so it lines up with the log-prob the model gives at position ``j``; ``spans[i]``
    says where ``steps[i]``'s response is.
    """

    ids: torch.Tensor
    attention: torch.Tensor
    mask: torch.Tensor
    rollout_logps: torch.Tensor
    steps: list[Step]
    spans: list[Span]
    roles: list[str]
    """Per row, as are ``losses`` and ``prompts``."""
    losses: list[str]
    prompts: torch.Tensor
    """Each row's trajectory group (its prompt, for ``loss_agg_mode=prompt-mean``), an index."""
    history_breaks: list[str] = field(default_factory=list)
    """Each step whose prompt does not extend its trajectory's previous step (where, in words); it starts a row."""
    old_logps: torch.Tensor | None = None
    ref_logps: torch.Tensor | None = None
    counted: torch.Tensor | None = None
    """The response tokens the loss's normalisers count (rollout rejection removes some); None: all of ``mask``."""

    @property
    def start(self) -> int:
        """The first position of any row whose next token is a response token (what the log-prob passes start at)."""
        return int(self.mask.any(0).nonzero()[0]) if bool(self.mask.any()) else 0

    @property
    def rows(self) -> int:
        return int(self.ids.shape[0])

    def put_on_steps(self, fields: Mapping[str, torch.Tensor]) -> None:
        """Each per-token tensor's values on its step's response tokens, as ``step.info[name]`` (stage 6 reads them)."""
        for name, tensor in fields.items():
            for step, span in zip(self.steps, self.spans, strict=True):
                step.info[name] = tensor[span.row, span.start : span.stop].tolist()

    def per_step(self, tensor: torch.Tensor) -> list[float]:
        """Each step's sum of a per-token tensor over its response tokens."""
        return [float(tensor[span.row, span.start : span.stop].sum()) for span in self.spans]

    def totals(self, mini: torch.Tensor) -> MiniBatchTotals:
        """The counts a mini-batch's loss divides by, over all its rows (every rank alike)."""
        counted = (self.mask if self.counted is None else self.counted)[mini]
        of_prompt = torch.zeros(self.rows, device=counted.device)
        tokens, prompts = prompt_counts(counted, self.prompts[mini])
        of_prompt[mini] = tokens.to(of_prompt.dtype)
        return MiniBatchTotals(counted.sum().clamp(min=1), len(mini), of_prompt, prompts)

    def advantages(self) -> torch.Tensor:
        """Each response token's advantage (a step's single one on all its tokens), filled in one indexed write."""
        rows: list[int] = []
        columns: list[int] = []
        given: list[Any] = []
        for step, span in zip(self.steps, self.spans, strict=True):
            advantage, count = step.advantage, span.stop - span.start
            if advantage is None:
                raise TrainerError("A step reached the policy update without an advantage; stage 6 did not run.")
            if isinstance(advantage, float | int):
                per_token = [advantage] * count
            else:
                per_token = np.asarray(advantage, dtype=np.float64).reshape(-1).tolist()
                if len(per_token) == 1:
                    per_token *= count
                elif len(per_token) != count:
                    raise TrainerError(
                        f"A step has {len(per_token)} advantages for {count} response tokens; give one per token or "
                        "a single one."
                    )
            given += per_token
            rows += [span.row] * count
            columns += range(span.start, span.stop)
        values = np.zeros(tuple(self.mask.shape), dtype=np.float32)
        values[rows, columns] = given
        return torch.from_numpy(values).to(device=self.mask.device, dtype=self.mask.dtype)


def response_tokens(episodes: Sequence[Episode]) -> int:
    """The response tokens of the episodes' steps: what was generated for them, in this process or a worker."""
    return sum(len(step.response_ids) for ep in episodes for trajectory in ep.trajectories for step in trajectory.steps)


def token_log_probs(
    model: Any, ids: torch.Tensor, attention: torch.Tensor, entropy_grad: bool = False, start: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-prob of each next token of ``ids`` and the entropy of each position's distribution (:func:`score_tokens`).

    The entropy carries a gradient only with ``entropy_grad`` (an entropy bonus in the loss).
    Positions before ``start`` (the batch's first response token, :attr:`RowBatch.start`) are 0.
    """
    scores = score_tokens(model, ids, attention, start, entropy=True, entropy_grad=entropy_grad)
    return scores.log_probs, scores.entropy  # type: ignore[return-value]


def token_statistics(
    model: Any, ids: torch.Tensor, attention: torch.Tensor, entropy_grad: bool = False, start: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`token_log_probs` and each position's sum of squared probabilities (verl's ``sum_pi_squared``)."""
    scores = score_tokens(model, ids, attention, start, entropy=True, entropy_grad=entropy_grad, squares=True)
    return scores.log_probs, scores.entropy, scores.sum_pi_squared  # type: ignore[return-value]


def _check_ids(step: Step, group: TrajectoryGroup, trajectory: Trajectory, vocab_size: int, workflow: str) -> None:
    for part, ids in (("prompt", step.prompt_ids), ("response", step.response_ids)):
        bad = [i for i in ids if not (isinstance(i, Integral) and 0 <= i < vocab_size)][:1]  # None is a bad id too
        if bad:
            raise WorkflowError(
                f"{workflow} produced token id {bad[0]!r} in the {part} of a step of group "
                f"{group.group_id!r} (trajectory {trajectory.name!r}), outside the model's vocabulary "
                f"(ids 0 to {vocab_size - 1}); encode with the run's tokenizer."
            )


def _in_vocabulary(ids: list[Any], vocab_size: int) -> np.ndarray | None:
    """``ids`` (not empty) as one int64 array when every id is an integer in the vocabulary, checked at once."""
    try:
        flat = np.array(ids)
    except (OverflowError, TypeError, ValueError):
        return None
    if flat.dtype.kind not in "iub" or flat.min() < 0 or flat.max() >= vocab_size:
        return None
    return flat.astype(np.int64, copy=False)


def _extends(row: list[int], prompt: Sequence[int]) -> bool:
    return len(prompt) >= len(row) and list(prompt[: len(row)]) == row


def pack_rows(
    groups: Sequence[TrajectoryGroup],
    loss_of: Mapping[str, str],
    pad: int,
    device: torch.device,
    vocab_size: int,
    workflow: str = "the workflow",
) -> RowBatch:
    """The steps with a response as rows (``pad`` after them): a trajectory's turns share a row while they extend it.

    A step whose prompt is not its trajectory's previous prompt and response followed by new
    tokens (the chat template rewrote the history, or the workflow rebuilt its prompt) starts
    a row of its own and is listed in ``history_breaks``: it trains on what it was sampled
    from, in a separate forward pass. A token id outside ``0 .. vocab_size - 1`` is a
    :class:`WorkflowError` naming ``workflow``, the id and its group, not an index error
    inside the model's embedding.
    """
    rows: list[list[int]] = []
    row_groups: list[int] = []
    steps: list[Step] = []
    spans: list[Span] = []
    logps: list[float] = []
    """Each step's response log-probs, in the order of ``spans`` (NaN for a step sampled without them)."""
    roles, losses, breaks = [], [], []
    for index, group in enumerate(groups):
        for trajectory in group.trajectories:
            current: list[int] | None = None
            for turn, step in enumerate(trajectory.steps):
                response = step.response_ids
                if not response:
                    if step.model_response:
                        raise WorkflowError(
                            f"{workflow} produced step {turn} of group {group.group_id!r} (trajectory "
                            f"{trajectory.name!r}) with a reply's text but no response_ids; give the step the "
                            "engine's ModelOutput (Step(model_output=...), or call the model through "
                            "TimingTrackingMixin.timed_llm_call, which attaches it)."
                        )
                    continue
                if not step.prompt_ids:
                    raise WorkflowError(
                        f"{workflow} produced a step of group {group.group_id!r} (trajectory {trajectory.name!r}) "
                        "with response ids but no prompt_ids; keep the ids the model was given "
                        "(ModelOutput.prompt_ids) on the step."
                    )
                if current is None or not _extends(current, step.prompt_ids):
                    if current is not None:
                        breaks.append(f"group {group.group_id!r}, trajectory {trajectory.name!r}, step {turn}")
                    current = []
                    rows.append(current)
                    row_groups.append(index)
                    roles.append(group.group_role)
                    losses.append(loss_of[group.group_role])
                current += step.prompt_ids[len(current) :]  # the new prompt tokens (no loss)
                start = len(current) - 1
                current += response
                spans.append(Span(len(rows) - 1, start, start + len(response)))
                logps += step.logprobs if step.logprobs else [math.nan] * len(response)
                steps.append(step)
    if not rows:
        raise TrainerError("The trajectory groups hold no response tokens; the workflow produced empty steps.")
    every_id = list(itertools.chain.from_iterable(rows))
    flat = _in_vocabulary(every_id, vocab_size)
    if flat is None:  # find the culprit among the packed steps, for the error; ids of other integer types pass as ints
        for group in groups:
            for trajectory in group.trajectories:
                for step in trajectory.steps:
                    if step.response_ids:
                        _check_ids(step, group, trajectory, vocab_size, workflow)
        flat = np.array([int(i) for i in every_id], dtype=np.int64)
    # every row's values at once: a row-major boolean fill takes the rows' concatenation in order
    lengths = np.array([len(row) for row in rows])
    width = int(lengths.max())
    attention = np.arange(width) < lengths[:, None]
    ids = np.full((len(rows), width), pad, dtype=np.int64)
    ids[attention] = flat
    # the response positions from the spans: position j holds token j + 1's values
    where = np.array([(span.row, span.start, span.stop) for span in spans])
    counts = where[:, 2] - where[:, 1]
    offsets = np.repeat(where[:, 1] - (np.cumsum(counts) - counts), counts)
    at = (np.repeat(where[:, 0], counts), np.arange(len(logps)) + offsets)
    mask = np.zeros((len(rows), width - 1), dtype=np.float32)
    mask[at] = 1.0
    rollout = np.zeros((len(rows), width - 1), dtype=np.float32)
    rollout[at] = logps
    return RowBatch(
        torch.from_numpy(ids).to(device),
        torch.from_numpy(attention.astype(np.int64)).to(device),
        torch.from_numpy(mask).to(device),
        torch.from_numpy(rollout).to(device),
        steps,
        spans,
        roles,
        losses,
        torch.from_numpy(np.array(row_groups)).to(device),
        breaks,
    )
