"""Stage 7's parts: a mini-batch's micro-batches, their scores and losses, and the optimizer step between them.

:class:`UpdateSteps` is part of :class:`~rllm_transformers.backend.TransformersBackend`, whose ``update_policy``
runs the epochs and mini-batches through these; the attributes declared here are the backend's.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import torch
from omegaconf import DictConfig

from rllm.errors import TrainerError
from rllm.losses import LossSettings
from rllm_transformers.batch import MiniBatchTotals, RowBatch
from rllm_transformers.distributed import Distributed
from rllm_transformers.logprobs import TokenScores, score_tokens


@dataclass(frozen=True)
class UpdateSchedule:
    """The settings stages 5 and 7 read every step, read from ``rllm.transformers`` once: an OmegaConf attribute
    costs about 7.5 us, and a step read a dozen of them."""

    ppo_epochs: int
    mini_batches: int
    micro_batches: int
    max_tokens_per_micro_batch: int
    share_prompts: bool
    max_grad_norm: float

    @classmethod
    def of(cls, options: DictConfig) -> UpdateSchedule:
        return cls(
            int(options.ppo_epochs),
            int(options.mini_batches),
            int(options.micro_batches),
            int(options.max_tokens_per_micro_batch),
            bool(options.share_prompts),
            float(options.max_grad_norm),
        )


class UpdateSteps:
    """The update's per-micro-batch work and per-mini-batch optimizer step."""

    schedule: UpdateSchedule
    device: torch.device
    distributed: Distributed | None
    trained: torch.nn.Module
    optimizer: torch.optim.Optimizer
    grad_scaler: Any
    entropy_bonus: bool
    default_settings: LossSettings
    role_settings: dict[str, LossSettings]

    def _settings(self, role: str) -> LossSettings:
        return self.role_settings.get(role, self.default_settings)

    def _micro_batches(self, mini: torch.Tensor, lengths: torch.Tensor) -> list[torch.Tensor]:
        """This rank's micro-batches of a mini-batch (``lengths``: every row's tokens).

        With several ranks the mini-batch is cut into ``micro_batches`` pieces rounded up to a
        multiple of the world size, and each rank takes as many consecutive pieces: the cut is
        the one process's at that count, so the gradient sums the same pieces in the same order
        (2 ranks give 1 process's gradient bit for bit). A piece may be empty (fewer rows than
        pieces); its rank still joins the all-reduce. With ``max_tokens_per_micro_batch`` each
        piece is cut further (:func:`within_budget`).
        """
        group, wanted = self.distributed, self.schedule.micro_batches
        if group is None:
            pieces = list(torch.tensor_split(mini, min(wanted, len(mini))))
        else:
            count = group.world_size * math.ceil(wanted / group.world_size)
            mine = group.rows(count)
            pieces = list(torch.tensor_split(mini, count)[mine.start : mine.stop])
        budget = self.schedule.max_tokens_per_micro_batch
        if budget <= 0:
            return pieces
        return [part for piece in pieces for part in (within_budget(piece, lengths, budget) if len(piece) else [piece])]

    def _micro_scores(self, batch: RowBatch, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The rows' log-probs and entropies under the trained model, as ``[rows, batch width - 1]``.

        The forward runs on the rows cut to their longest (the padding after it changes nothing
        before it) from their first response token; the entropy has a gradient with an entropy
        bonus, else it is computed without one for ``actor/entropy`` and the losses that read it.
        """
        mask = batch.mask[rows]
        width = int(batch.attention[rows].sum(1).max())
        responses = mask[:, : max(width - 1, 0)].any(0).nonzero()
        start = int(responses[0]) if len(responses) else 0
        scores: TokenScores = score_tokens(
            self.trained,
            batch.ids[rows, :width],
            batch.attention[rows, :width],
            start,
            entropy=True,
            entropy_grad=self.entropy_bonus,
            share_prompts=self.schedule.share_prompts,
        )
        after = (0, mask.shape[1] - scores.log_probs.shape[1])
        entropy = scores.entropy if scores.entropy is not None else torch.zeros_like(scores.log_probs)
        return torch.nn.functional.pad(scores.log_probs, after), torch.nn.functional.pad(entropy, after)

    def _backward(self, loss: torch.Tensor, group: Distributed | None) -> None:
        """``loss.backward()`` (fp16-mixed: of the scaled loss); under DDP a lost rank there is the one-line error,
        not a traceback."""
        if self.grad_scaler is not None:
            loss = self.grad_scaler.scale(loss)
        if group is None:
            loss.backward()
            return
        with group.collective("all-reducing gradients"):
            loss.backward()

    def _idle_backward(self, batch: RowBatch, rows: torch.Tensor) -> None:
        """A rank without rows in a micro-batch still joins the gradient all-reduce: a zero loss through the model."""
        idle = score_tokens(self.trained, batch.ids[rows], batch.attention[rows])
        self._backward(idle.log_probs.sum() * 0.0, self.distributed)

    def _micro_loss(
        self,
        batch: RowBatch,
        rows: torch.Tensor,
        logp: torch.Tensor,
        entropy: torch.Tensor,
        advantages: torch.Tensor,
        role_of: torch.Tensor,
        role_names: list[str],
        totals: MiniBatchTotals,
        sums: dict[str, list[float]],
    ) -> torch.Tensor:
        """The micro-batch's share of its mini-batch's loss: each role's rows through that role's registered loss."""
        loss = torch.zeros((), device=self.device)
        if batch.old_logps is None:
            raise TrainerError("The policy update ran before stage 5 computed the old log-probs.")
        for index, role in enumerate(role_names):
            mine = role_of[rows] == index
            if not bool(mine.any()):
                continue
            picked = rows[mine]
            mask = batch.mask[picked]
            settings = self._settings(role)
            part, metrics = settings.compute(
                log_probs=logp[mine],
                old_log_probs=batch.old_logps[picked],
                advantages=advantages[picked],
                response_mask=mask,
                rollout_log_probs=torch.nan_to_num(batch.rollout_logps[picked]) * mask,
                ref_log_probs=None if batch.ref_logps is None else batch.ref_logps[picked],
                entropy=entropy[mine],
                prompt_ids=batch.prompts[picked],
                batch_num_tokens=totals.tokens,
                global_batch_size=totals.rows,
                prompt_num_tokens=totals.prompt_tokens[picked],
                num_prompts=totals.prompts,
            )
            loss = loss + part
            # the role's loss over its own tokens (or sequences, prompts), as if it were the whole mini-batch
            if settings.agg_mode == "prompt-mean":
                share = float(totals.prompts) / max(len(set(batch.prompts[picked].tolist())), 1)
            elif settings.agg_mode.startswith("seq"):
                share = totals.rows / len(picked)
            else:
                share = float(totals.tokens / mask.sum())
            sums[f"actor/{role}/loss"].append(float(part.detach()) * share)
            for key, value in metrics.items():
                sums[f"actor/{key}"].append(float(value))
        return loss

    @staticmethod
    def _token_metrics(
        sums: dict[str, list[float]], mask: torch.Tensor, entropy: torch.Tensor, logp: torch.Tensor, old: torch.Tensor
    ) -> None:
        """Token means of one micro-batch: entropy and the approximate KL to the old policy."""
        with torch.no_grad():
            count = mask.sum().clamp(min=1)
            sums["actor/entropy"].append(float((entropy * mask).sum() / count))
            sums["actor/approx_kl"].append(float(((old - logp.detach()) * mask).sum() / count))

    def _step_optimizer(self, mini_loss: float, losses: str, step: int, sums: dict[str, list[float]]) -> None:
        """One mini-batch's optimizer step after its micro-batches' backward passes: the loss (summed over the
        ranks) and the clipped gradient checked finite, then AdamW's step (fp16-mixed: an overflow skips it)."""
        if self.distributed is not None:
            mini_loss = self.distributed.total(mini_loss)
        if not math.isfinite(mini_loss):
            self.optimizer.zero_grad(set_to_none=True)
            raise TrainerError(
                f"Step {step}: the policy loss {losses} is {mini_loss} (not finite); the model was not updated and "
                "no checkpoint of this step is written. Lower rllm.transformers.lr or check the advantages and rewards."
            )
        scaler = self.grad_scaler
        if scaler is not None:  # the gradient as the loss's own, before clipping (overflows are recorded)
            scaler.unscale_(self.optimizer)
        limit = self.schedule.max_grad_norm
        foreach = True if self.distributed is None else None  # one process: multi-tensor, as its AdamW (backend.py)
        norm = torch.nn.utils.clip_grad_norm_(self.trained.parameters(), limit, foreach=foreach)
        norm = norm.full_tensor() if hasattr(norm, "full_tensor") else norm  # FSDP: a DTensor
        finite = bool(torch.isfinite(norm))
        if not finite and scaler is None:
            self.optimizer.zero_grad(set_to_none=True)
            raise TrainerError(
                f"Step {step}: the gradient of the policy loss {losses} "
                "is not finite; the model was not updated and no checkpoint of this step is written."
            )
        if scaler is None:
            self.optimizer.step()
        else:  # an overflow skips the step and lowers the scale, as torch.amp does
            scaler.step(self.optimizer)
            scaler.update()
            sums["actor/loss_scale"].append(float(scaler.get_scale()))
            sums["actor/skipped_steps"].append(0.0 if finite else 1.0)
        sums["actor/loss"].append(mini_loss)
        if finite:
            sums["actor/grad_norm"].append(float(norm))

    def _all_ranks(self, sums: dict[str, list[float]]) -> dict[str, list[float]]:
        """The micro-batch metrics of every rank (the loss and norm are the same on all)."""
        if self.distributed is None:
            return sums
        merged: dict[str, list[float]] = defaultdict(list)
        for part in self.distributed.gather(dict(sums)):
            for key, value in part.items():
                merged[key].extend(value)
        return merged


def within_budget(rows: torch.Tensor, lengths: torch.Tensor, budget: int) -> list[torch.Tensor]:
    """``rows`` cut into consecutive pieces whose rows x longest row's tokens is at most ``budget``.

    The rows are taken longest first, so each piece's padding is small; a row longer than the
    budget is a piece of its own. The loss of every piece uses the mini-batch's normalisers,
    so the gradient is the same sum in another grouping.
    """
    order = rows[torch.argsort(lengths[rows], descending=True, stable=True)]
    sizes = lengths[order].tolist()
    pieces: list[torch.Tensor] = []
    begin = 0
    for index in range(1, len(sizes) + 1):
        if index == len(sizes) or (index - begin + 1) * sizes[begin] > budget:
            pieces.append(order[begin:index])
            begin = index
    return pieces
