"""Per-token inputs on the transformers backend: stage 5 fills them, OTB trains on them; rollout rejection and the
entropy bonus are honoured; a backend that cannot fill a field is refused by name before anything is built."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
from extras import missing
from omegaconf import DictConfig

from rllm.errors import ConfigError
from rllm.trainer import UnifiedTrainer
from rllm.trainer.logging import METRICS_FILE, read_metrics

MakeConfig = Callable[..., DictConfig]
ABSENT = missing("torch", "transformers", "safetensors")
"""What the training test needs and this environment lacks (the refusal test needs none of it)."""


def _train(config: DictConfig) -> list[dict]:
    trainer = UnifiedTrainer(None, config, progress=False)
    try:
        trainer.fit()
    finally:
        trainer.shutdown()
    return [r for r in read_metrics(trainer.output_dir / METRICS_FILE) if r["kind"] == "train"]


@pytest.mark.skipif(bool(ABSENT), reason=f"{', '.join(ABSENT)} not installed: pip install 'rllm[transformers]'")
def test_optimal_token_baseline_trains_on_the_fields_stage_5_fills(tiny_config: MakeConfig) -> None:
    steps = _train(
        tiny_config(
            "rllm.algorithm.adv_estimator=optimal_token_baseline",
            "rllm.algorithm.entropy_coeff=0.01",
            "rllm.algorithm.rollout_correction.rollout_rs=token_k3",
            "rllm.algorithm.rollout_correction.rollout_rs_threshold=0.5",
        )
    )
    assert [r["step"] for r in steps] == [1, 2]
    assert all(math.isfinite(r["actor/loss"]) and "actor/entropy_bonus" in r for r in steps)
    assert all(0 <= r["actor/rollout_rs/masked_fraction"] <= 1 for r in steps)


def test_a_backend_that_cannot_fill_a_field_is_refused_naming_it(tiny_config: MakeConfig) -> None:
    config = tiny_config("rllm.algorithm.adv_estimator=optimal_token_baseline", "rllm.backend=embedded")
    with pytest.raises(
        ConfigError, match=r"'optimal_token_baseline' needs the per-token field 'old_log_probs'.*Embedded"
    ):
        UnifiedTrainer(None, config, progress=False)
