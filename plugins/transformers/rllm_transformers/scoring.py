"""Stage 5: the batch's log-probs under the old policy (PPO's denominator), the reference and the teacher, the
per-token fields the run's estimators read, and the KL-in-reward penalty.

:class:`BatchScoring` is part of :class:`~rllm_transformers.backend.TransformersBackend`; the attributes declared
here are the backend's.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

import torch

from rllm.losses import KLInReward, LossSettings, rejection_mask
from rllm.toolkit import TOKEN_FIELDS, get_estimator
from rllm.trainer import TrainerState
from rllm_transformers.batch import RowBatch
from rllm_transformers.distributed import Distributed
from rllm_transformers.logprobs import score_tokens
from rllm_transformers.lora import AdaptersOff, LoraSettings
from rllm_transformers.model import set_training
from rllm_transformers.rewards import subtract_from_rewards
from rllm_transformers.sharding import is_sharded
from rllm_transformers.update import UpdateSchedule


class BatchScoring:
    """Stage 5 of the transformers backend, and what the update reads of it (:meth:`_old_policy_is_the_updates`)."""

    algorithm: Any
    schedule: UpdateSchedule
    model: torch.nn.Module
    trained: torch.nn.Module
    host_copy: bool
    reference: torch.nn.Module | AdaptersOff | None
    teacher: torch.nn.Module | None
    distributed: Distributed | None
    lora: LoraSettings | None
    token_fields: set[str]
    default_settings: LossSettings
    kl_in_reward: KLInReward | None
    _load_sharded: Callable[[], None]

    async def process_backend_batch(self, trainer_state: TrainerState) -> None:
        """The old policy's log-probs (PPO's denominator), the reference policy's, and the KL-in-reward penalty.

        The penalty uses the policy that sampled the batch (the old log-probs) against the
        reference and reaches the rewards here, before stage 6 computes advantages.
        """
        batch: RowBatch = trainer_state.backend_batch
        self._load_sharded()  # a resumed checkpoint, which the host-copy layout scores with
        policy = self.trained if self.host_copy else self.model  # the sharded copy where no rank keeps the whole
        set_training(policy, False)  # LoRA's dropout: the old policy's log-probs are the model's, not a draw
        with torch.no_grad():
            entropy = squares = None
            wanted = {"entropy", "sum_pi_squared"} & self.token_fields
            if self.algorithm.rollout_correction.bypass_mode:
                batch.old_logps = batch.rollout_logps
                if wanted:
                    _, entropy, squares = self._statistics(policy, batch, wanted)
            elif not self._old_policy_is_the_updates():
                batch.old_logps, entropy, squares = self._statistics(policy, batch, wanted)
            if self.reference is not None:
                batch.ref_logps = self._statistics(self.reference, batch)[0]
            teacher = None if self.teacher is None else self._statistics(self.teacher, batch)[0]
        if self.token_fields:
            per_token = {
                "old_log_probs": batch.old_logps,
                "entropy": entropy,
                "sum_pi_squared": squares,
                "teacher_log_probs": teacher,
            }
            batch.put_on_steps({k: v for k, v in per_token.items() if k in self.token_fields and v is not None})
        correction = self.default_settings.checked
        if correction.rejection:  # verl's rejection leaves the normalisers too: the kept tokens are counted
            keep, metrics = rejection_mask(
                batch.old_logps, torch.nan_to_num(batch.rollout_logps) * batch.mask, batch.mask, correction.rejection
            )
            batch.counted = batch.mask * keep
            trainer_state.metrics.update({f"actor/{k}": v for k, v in metrics.items()})
        if batch.old_logps is not None:
            trainer_state.metrics.update(self._rollout_gap(batch))
        if self.kl_in_reward is not None and batch.ref_logps is not None:
            penalty, metrics = self.kl_in_reward.penalty(batch.old_logps, batch.ref_logps, batch.mask)
            metrics.update(subtract_from_rewards(trainer_state.trajectory_groups, batch.steps, batch.per_step(penalty)))
            trainer_state.metrics.update(metrics)

    def _old_policy_is_the_updates(self) -> bool:
        """Whether the old log-probs are those the update's one forward pass computes, so stage 5 skips its pass.

        So it is with one optimizer step per batch (``ppo_epochs`` and ``mini_batches`` 1) in one
        process, when nothing before the update reads them: no estimator's per-token field, no
        KL in the reward, no rollout rejection, no LoRA dropout. The update's forward runs on the weights stage 5
        would have scored with; its log-probs, detached, are the old policy's (as TRL skips the
        pass when generation and optimisation are aligned).
        """
        return (
            self.distributed is None
            and self.schedule.ppo_epochs == 1
            and self.schedule.mini_batches == 1
            and not self.token_fields
            and self.kl_in_reward is None
            and not self.default_settings.checked.rejection
            and (self.lora is None or self.lora.dropout == 0)  # the update's forward draws LoRA's dropout
        )

    @staticmethod
    def _rollout_gap(batch: RowBatch) -> dict[str, float]:
        """``actor/rollout_logprob_diff``: how far the sampler's log-probs are from the old policy's."""
        known = (batch.mask > 0) & ~torch.isnan(batch.rollout_logps)
        if batch.old_logps is None or not bool(known.any()):
            return {}
        return {"actor/rollout_logprob_diff": float((batch.old_logps - batch.rollout_logps).abs()[known].mean())}

    def _statistics(
        self,
        model: Any,
        batch: RowBatch,
        wanted: Collection[str] = (),
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """The batch's token log-probs under ``model``, and the ``wanted`` ones of its entropies and sums of squared
        probabilities (None when not wanted: at a real vocabulary each is a pass over every position's logits).

        With several ranks each computes its share of the rows, then all hold all. Under FSDP the reference (and in
        the host-copy layout the policy) is sharded: every rank runs one forward of whole rows (prompts shared, a
        rank could run two), a rank without rows on a row it discards.
        """
        group = self.distributed
        sharded = group is not None and group.sharded and is_sharded(model)
        entropy, squares = "entropy" in wanted, "sum_pi_squared" in wanted
        shared = self.schedule.share_prompts and not sharded
        options = {"entropy": entropy, "squares": squares, "share_prompts": shared}
        if group is None:
            scores = score_tokens(model, batch.ids, batch.attention, batch.start, **options)
            return scores.log_probs, scores.entropy, scores.sum_pi_squared
        rows = group.rows(batch.rows)
        if len(rows):
            ids, attention = batch.ids[rows.start : rows.stop], batch.attention[rows.start : rows.stop]
            scores = score_tokens(model, ids, attention, batch.start, **options)
            parts = (scores.log_probs, scores.entropy, scores.sum_pi_squared)
        else:
            if sharded:  # its forward gathers the layers: every rank runs one
                score_tokens(model, batch.ids[:1], batch.attention[:1], batch.start)
            empty = batch.mask[:0].float()
            parts = (empty, empty if entropy else None, empty if squares else None)
        gathered = [None if part is None else group.gather_rows(part, batch.rows) for part in parts]
        return gathered[0], gathered[1], gathered[2]  # type: ignore[return-value]

    def _required_token_fields(self) -> set[str]:
        algorithm = self.algorithm
        names = [algorithm.estimator, *algorithm.estimator_map.values()]
        needed = {f for n in names for f in get_estimator(str(getattr(n, "value", n))).requires}
        return needed & set(TOKEN_FIELDS)
