"""TRL's own loss computation, ``GRPOTrainer._compute_loss``, driven on given tensors (for parity tests).

The method reads a handful of the trainer's attributes; :class:`TRLLossStub` holds exactly those,
with a real single-process ``accelerate.Accelerator``, and answers the model forward with the
tensors a test chose, so TRL's code computes its loss on the same inputs as rllm's.
"""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace
from typing import Any

import torch
from accelerate import Accelerator
from trl import GRPOConfig, GRPOTrainer


class TRLLossStub:
    """What ``GRPOTrainer._compute_loss`` reads of ``self``, for one loss type and config."""

    def __init__(self, args: GRPOConfig, log_probs: torch.Tensor, entropy: torch.Tensor, accumulation: int = 1):
        self.args = args
        self.loss_type = args.loss_type
        self.beta = args.beta
        self.epsilon_low = args.epsilon
        self.epsilon_high = args.epsilon_high if args.epsilon_high is not None else args.epsilon
        self.importance_sampling_level = args.importance_sampling_level
        self.top_entropy_quantile = args.top_entropy_quantile
        self.off_policy_mask_threshold = None
        self.use_vllm = False
        self.vllm_importance_sampling_correction = False
        self.max_completion_length = args.max_completion_length
        self.current_gradient_accumulation_steps = accumulation
        self.aux_loss_enabled = False
        self._entropy_bonus_enabled = False
        self.accelerator = Accelerator(cpu=True)  # after the config: TrainingArguments resets accelerate's state
        self.model = SimpleNamespace(training=True)
        self._metrics: dict[str, Any] = {"train": defaultdict(list), "eval": defaultdict(list)}
        self._forward = (log_probs, entropy)
        self.get_high_entropy_mask = GRPOTrainer.get_high_entropy_mask.__get__(self)
        self.get_off_policy_mask = GRPOTrainer.get_off_policy_mask
        self.get_gamma_weights = GRPOTrainer.get_gamma_weights

    def _get_per_token_logps_and_entropies(self, *args: Any, **kwargs: Any) -> tuple[Any, Any, None]:
        return self._forward[0], self._forward[1], None

    def loss(self, inputs: dict[str, Any]) -> torch.Tensor:
        return GRPOTrainer._compute_loss(self, None, inputs)


def trl_inputs(
    mask: torch.Tensor, advantages: torch.Tensor, old: torch.Tensor, num_items: float, ref: torch.Tensor | None = None
) -> dict[str, Any]:
    """The batch dict ``_compute_loss`` reads (prompt of one token, the completion under ``mask``)."""
    rows = mask.shape[0]
    inputs = {
        "prompt_ids": torch.zeros(rows, 1, dtype=torch.long),
        "prompt_mask": torch.ones(rows, 1, dtype=torch.long),
        "completion_ids": torch.zeros_like(mask, dtype=torch.long),
        "completion_mask": mask,
        "advantages": advantages,
        "old_per_token_logps": old,
        "num_items_in_batch": torch.tensor(float(num_items)),
    }
    if ref is not None:
        inputs["ref_per_token_logps"] = ref
    return inputs
