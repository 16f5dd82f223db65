"""What a policy loss receives (:class:`LossContext`) and the signature a loss has (:data:`LossFn`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rllm.losses.aggregation import aggregate, mean_over_sequences

LossFn = Callable[["LossContext"], tuple[Any, dict[str, float]]]
"""A loss: ``fn(ctx) -> (scalar_tensor, metrics)``."""


@dataclass
class LossContext:
    """What a policy loss receives: per-token tensors of shape ``(batch, tokens)`` and the run's settings.

    ``entropy`` is the policy's entropy at each position (no gradient needed), for losses that
    select tokens by it; a caller that does not compute it leaves it None. ``prompt_ids``
    ``(batch,)`` says which prompt each sequence answers (``prompt-mean`` needs it). ``dp_size``,
    ``batch_num_tokens``, ``global_batch_size`` and ``loss_scale_factor`` are
    verl's global-batch information, and ``prompt_num_tokens`` (per sequence) and ``num_prompts``
    its ``prompt-mean`` counterpart, so that a micro-batch's loss is normalised over the
    whole batch (None: this micro-batch is the whole batch). Reduce with :meth:`aggregate` (a
    per-token loss) or :meth:`sequence_mean` (one loss per sequence), never with ``.mean()``: the
    losses of a batch's micro-batches then add up to the batch's loss.
    """

    log_probs: Any
    old_log_probs: Any
    advantages: Any
    response_mask: Any
    rollout_log_probs: Any = None
    ref_log_probs: Any = None
    rollout_is_weights: Any = None
    entropy: Any = None
    prompt_ids: Any = None
    options: dict[str, Any] = field(default_factory=dict)
    agg_mode: str = "token-mean"
    dp_size: int = 1
    batch_num_tokens: Any = None
    global_batch_size: Any = None
    loss_scale_factor: Any = None
    prompt_num_tokens: Any = None
    num_prompts: Any = None
    name: str = ""

    def aggregate(self, per_token: Any, mode: str | None = None, mask: Any = None) -> Any:
        """``per_token`` reduced to a scalar by ``mode`` (default: the run's ``agg_mode``) over ``mask``."""
        return aggregate(
            per_token,
            self.response_mask if mask is None else mask,
            mode or self.agg_mode,
            dp_size=self.dp_size,
            batch_num_tokens=self.batch_num_tokens,
            global_batch_size=self.global_batch_size,
            loss_scale_factor=self.loss_scale_factor,
            prompt_ids=self.prompt_ids,
            prompt_num_tokens=self.prompt_num_tokens,
            num_prompts=self.num_prompts,
        )

    def sequence_mean(self, per_sequence: Any) -> Any:
        """One loss per sequence ``(batch,)`` reduced to a scalar: the mean over the whole batch's sequences."""
        return mean_over_sequences(
            per_sequence, self.response_mask, dp_size=self.dp_size, global_batch_size=self.global_batch_size
        )
