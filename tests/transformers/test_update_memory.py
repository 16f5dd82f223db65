"""The update's memory settings change where memory goes, not the gradient; the precision key means what it says.

``gradient_checkpointing`` and ``max_tokens_per_micro_batch`` give the gradient of a run
without them (the same rollouts: one seed); stage 5 computes the entropy and the squared
probabilities only for an estimator that reads them; ``precision`` puts the weights and the
compute where docs/transformers.md says, and the earlier ``dtype`` key keeps its meaning.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from extras import skip_module_without

skip_module_without("torch", "transformers", "safetensors", install="pip install 'rllm[transformers]' (CI does)")

import torch
from omegaconf import DictConfig

from rllm.errors import ConfigError, RLLMWarning
from rllm.trainer import UnifiedTrainer
from rllm.trainer.logging import METRICS_FILE, read_metrics
from rllm_transformers import scoring, update
from rllm_transformers.backend import within_budget

MakeConfig = Callable[..., DictConfig]
SCORED = ("rllm.transformers.ppo_epochs=2", "rllm.trainer.total_batches=1")
"""Two epochs, so stage 5 scores the old policy and each step is two optimizer steps; one batch."""


def _gradients(config: DictConfig) -> tuple[list[list[torch.Tensor]], list[dict[str, Any]]]:
    """Every optimizer step's gradients, and the train records."""
    trainer = UnifiedTrainer(None, config, progress=False)
    optimizer = trainer.backend.optimizer
    step, seen = optimizer.step, []

    def recorded(*args: Any, **kwargs: Any) -> Any:
        seen.append([p.grad.detach().clone() for group in optimizer.param_groups for p in group["params"]])
        return step(*args, **kwargs)

    optimizer.step = recorded
    try:
        trainer.fit()
    finally:
        trainer.shutdown()
    return seen, [r for r in read_metrics(trainer.output_dir / METRICS_FILE) if r["kind"] == "train"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "override", ["rllm.transformers.gradient_checkpointing=true", "rllm.transformers.max_tokens_per_micro_batch=40"]
)
def test_checkpointing_and_a_token_budget_give_the_same_gradient(
    tiny_config: MakeConfig, override: str, tmp_path: Path
) -> None:
    bonus = "rllm.algorithm.entropy_coeff=0.01"  # a gradient whatever the rewards (the entropy's, through the chunks)
    plain, _ = _gradients(tiny_config(*SCORED, bonus))
    other, _ = _gradients(tiny_config(*SCORED, bonus, override, f"rllm.trainer.output_dir={tmp_path / 'other'}"))
    assert len(plain) == len(other) == 2
    for first, second in zip(plain, other, strict=True):
        assert sum(float(g.abs().sum()) for g in first) > 0
        for a, b in zip(first, second, strict=True):
            torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-7)


def test_a_token_budget_cuts_rows_longest_first_within_it() -> None:
    lengths = torch.tensor([5, 9, 3, 9, 20, 4])
    pieces = within_budget(torch.tensor([0, 1, 2, 3, 4, 5]), lengths, budget=18)
    # longest first: 20 alone (over the budget), 9+9 (2 x 9 = 18), then 5, 4, 3 (3 x 5 = 15)
    assert [p.tolist() for p in pieces] == [[4], [1, 3], [0, 5, 2]]


def test_stage_5_computes_entropy_and_squares_only_for_an_estimator_that_reads_them(
    tiny_config: MakeConfig, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls: list[tuple[bool, bool, bool]] = []
    original = scoring.score_tokens

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append((torch.is_grad_enabled(), kwargs.get("entropy", False), kwargs.get("squares", False)))
        return original(*args, **kwargs)

    monkeypatch.setattr(scoring, "score_tokens", spy)  # stage 5's
    monkeypatch.setattr(update, "score_tokens", spy)  # the update's
    for estimator, wanted in (("grpo", (False, False)), ("optimal_token_baseline", (False, True))):
        calls.clear()
        where = f"rllm.trainer.output_dir={tmp_path / estimator}"
        trainer = UnifiedTrainer(
            None, tiny_config(*SCORED, f"rllm.algorithm.adv_estimator={estimator}", where), progress=False
        )
        try:
            trainer.fit()
        finally:
            trainer.shutdown()
        stage_5 = [call[1:] for call in calls if not call[0]]
        assert stage_5 == [wanted]
        assert all(call[1] for call in calls if call[0])  # the update's: actor/entropy and the losses that read it


def test_bf16_mixed_keeps_float32_weights_and_computes_in_bfloat16(tiny_config: MakeConfig) -> None:
    trainer = UnifiedTrainer(None, tiny_config("rllm.transformers.precision=bf16-mixed"), progress=False)
    try:
        model = trainer.backend.model
        assert {p.dtype for p in model.parameters()} == {torch.float32}
        out = model(input_ids=torch.tensor([[1, 2, 3]]), use_cache=False)
        assert out.logits.dtype == torch.bfloat16
        trainer.fit()
        assert {p.dtype for group in trainer.backend.optimizer.param_groups for p in group["params"]} == {torch.float32}
        state = next(iter(trainer.backend.optimizer.state.values()))
        assert state["exp_avg"].dtype == state["exp_avg_sq"].dtype == torch.float32
    finally:
        trainer.shutdown()


def test_fp16_mixed_scales_the_loss(tiny_config: MakeConfig) -> None:
    _, records = _gradients(tiny_config("rllm.transformers.precision=fp16-mixed"))
    assert len(records) == 2
    assert all(r["actor/loss_scale"] > 1 and r["actor/skipped_steps"] in (0.0, 1.0) for r in records)


@pytest.mark.slow
def test_fp16_mixed_resumes_with_its_loss_scale(tiny_config: MakeConfig, tmp_path: Path) -> None:
    fp16, run = "rllm.transformers.precision=fp16-mixed", ("rllm.trainer.total_batches=4", "rllm.trainer.save_freq=2")
    _, clean = _gradients(tiny_config(fp16, *run, f"rllm.trainer.output_dir={tmp_path / 'clean'}"))
    _gradients(tiny_config(fp16, "rllm.trainer.total_batches=2", f"rllm.trainer.output_dir={tmp_path / 'split'}"))
    _, resumed = _gradients(tiny_config(fp16, *run, f"rllm.trainer.output_dir={tmp_path / 'split'}"))
    keys = ("step", "actor/loss", "actor/loss_scale", "actor/skipped_steps")
    assert [[r[k] for k in keys] for r in resumed] == [[r[k] for k in keys] for r in clean]
    fresh = UnifiedTrainer(None, tiny_config(fp16, f"rllm.trainer.output_dir={tmp_path / 'fresh'}"), progress=False)
    try:
        scaler = fresh.backend.grad_scaler
        assert scaler is not None and scaler.state_dict()["_growth_tracker"] == 0
        fresh.backend.load_checkpoint(tmp_path / "split" / "checkpoints" / "step_2")
        assert scaler.state_dict()["_growth_tracker"] == 2  # two unskipped steps towards a growth
    finally:
        fresh.shutdown()


def test_the_earlier_dtype_key_means_bf16_pure_and_warns(tiny_config: MakeConfig) -> None:
    with pytest.warns(RLLMWarning, match="bf16-pure keeps weights and AdamW state in bfloat16"):
        trainer = UnifiedTrainer(None, tiny_config("rllm.transformers.dtype=bfloat16"), progress=False)
    try:
        assert {p.dtype for p in trainer.backend.model.parameters()} == {torch.bfloat16}
    finally:
        trainer.shutdown()
    with pytest.raises(ConfigError, match=r"dtype=bfloat16 .* contradicts rllm.transformers.precision=bf16-mixed"):
        UnifiedTrainer(
            None,
            tiny_config("rllm.transformers.dtype=bfloat16", "rllm.transformers.precision=bf16-mixed"),
            progress=False,
        )
