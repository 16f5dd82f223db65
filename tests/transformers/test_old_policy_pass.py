"""Stage 5 skips the old policy's pass when the update's one forward pass gives the same log-probs (as TRL does).

With one optimizer step per batch (``ppo_epochs`` and ``mini_batches`` 1) and nothing reading
the old log-probs before the update, they are the update's own, detached: one forward pass
fewer per step. Otherwise (several epochs, an estimator's per-token field) stage 5 scores.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from extras import skip_module_without

skip_module_without("torch", "transformers", "safetensors", install="pip install 'rllm[transformers]' (CI does)")

from omegaconf import DictConfig

from rllm.trainer import UnifiedTrainer
from rllm.trainer.logging import METRICS_FILE, read_metrics


def _run(config: DictConfig) -> tuple[list[str], list[dict]]:
    """The stage of every forward pass of the policy outside sampling, and the run's train records."""
    trainer = UnifiedTrainer(None, config, progress=False)
    backend, stages = trainer.backend, []
    for name in ("process_backend_batch", "update_policy"):
        original = getattr(backend, name)

        async def timed(state: object, _original: Callable = original, _name: str = name) -> None:
            stages.append(f"{_name} start")
            await _original(state)

        setattr(backend, name, timed)
    forward = backend.model.forward

    def counted(*args: object, **kwargs: object) -> object:
        if kwargs.get("position_ids") is None:  # not the engine's sampling, which passes the left-padded positions
            stages.append("forward")
        return forward(*args, **kwargs)

    backend.model.forward = counted
    try:
        trainer.fit()
    finally:
        trainer.shutdown()
    records = [r for r in read_metrics(trainer.output_dir / METRICS_FILE) if r["kind"] == "train"]
    return stages, records


def test_one_update_per_batch_scores_the_old_policy_in_the_update_forward(
    tiny_config: Callable[..., DictConfig],
) -> None:
    stages, records = _run(tiny_config())
    # two steps: stage 5 runs no forward, the update one
    assert stages == ["process_backend_batch start", "update_policy start", "forward"] * 2
    for record in records:
        # the sampler's log-probs against the old policy's (the update's forward): the same weights
        assert record["actor/rollout_logprob_diff"] == pytest.approx(0.0, abs=1e-5)
        assert record["actor/approx_kl"] == 0.0  # the old log-probs are the update's, exactly
        assert record["actor/pg_clipfrac"] == 0.0


@pytest.mark.parametrize(
    "override",
    [
        "rllm.transformers.ppo_epochs=2",
        "rllm.transformers.mini_batches=2",
        "rllm.algorithm.adv_estimator=optimal_token_baseline",
    ],
)
def test_several_optimizer_steps_score_the_old_policy_in_stage_5(
    tiny_config: Callable[..., DictConfig], override: str
) -> None:
    stages, _ = _run(tiny_config(override))
    first_update = stages.index("update_policy start")
    assert stages[:first_update] == ["process_backend_batch start", "forward"]
