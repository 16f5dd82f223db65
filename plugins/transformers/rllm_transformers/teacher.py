"""Distillation's teacher: ``rllm.transformers.teacher`` loaded and frozen, when the run's estimators read its
log-probs (stage 5 writes them as ``teacher_log_probs``)."""

from __future__ import annotations

from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from rllm.engine import same_vocabulary
from rllm.errors import ConfigError
from rllm_transformers.model import TINY, load_policy
from rllm_transformers.plugin import TOKENIZERS


def load_teacher(
    options: DictConfig, needed: bool, estimator: Any, tokenizer: Any, device: torch.device, place: str | None = None
) -> torch.nn.Module | None:
    """The teacher ``options.teacher`` names, or None; ``needed``: an estimator of the run reads its log-probs.

    Either without the other is refused: an estimator reading ``teacher_log_probs`` needs the
    key, and the key without such an estimator would load a model nothing uses. ``place`` (``"cpu"``
    or ``"meta"``) leaves its weights off ``device``, for FSDP ranks that shard it.
    """
    name = options.teacher
    if name is None:
        if needed:
            raise ConfigError(
                f"Estimator {estimator!r} needs teacher_log_probs: set rllm.transformers.teacher "
                "to a model with the student's tokenizer (a directory, a hub id, or tiny)."
            )
        return None
    if not needed:
        raise ConfigError(
            f"rllm.transformers.teacher={name!r} is set but no estimator of the run reads teacher_log_probs; "
            "use rllm.algorithm.adv_estimator=distill, or leave the key unset."
        )
    teacher_options = OmegaConf.merge(options, {"model": str(name), "seed": int(options.seed) + 1})
    if str(name) != TINY:
        teacher_options.tokenizer = TOKENIZERS[0]  # a model directory or hub id brings its own tokenizer
    teacher = load_policy(teacher_options, place)
    if not same_vocabulary(tokenizer, teacher.tokenizer):
        student = str(options.model)
        raise ConfigError(
            f"rllm.transformers.teacher={name!r} has another tokenizer ({len(teacher.tokenizer)} tokens, EOS "
            f"{teacher.tokenizer.eos_token!r}) than the student rllm.transformers.model={student!r} "
            f"({len(tokenizer)} tokens, EOS {tokenizer.eos_token!r}); distillation needs one vocabulary."
        )
    model = teacher.model if place is not None else teacher.model.to(device)
    return model.eval().requires_grad_(False)
