"""Rollout correction against verl 0.9.1's ``rollout_corr_helper``: rejection masks, IcePop weights, the loss.

Seeded ragged batches with log-ratios of the trained policy to the sampler up to ±3, so every
criterion rejects some tokens or sequences and keeps others; float64. The masks and weights are
verl's exactly; the loss with rejection equals verl's loss on the mask verl's helper returns.
"""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch==2.13.0+cpu)")

from rllm.contract.names import REJECTION_MODES
from rllm.losses import compute_policy_loss
from rllm.losses.correction import parse_rejection, rejection_mask, truncated_is_weights

THRESHOLDS = {
    "token_k1": "0.6_1.8",
    "token_k2": "0.2",
    "token_k3": "0.2",
    "seq_sum_k1": "0.7_1.5",
    "seq_sum_k2": "1.0",
    "seq_sum_k3": "0.3",
    "seq_mean_k1": "0.8_1.25",
    "seq_mean_k2": "0.2",
    "seq_mean_k3": "0.6",
    "seq_max_k2": "0.2",
    "seq_max_k3": "0.3",
}
"""Bounds that keep part of the batch and reject the rest (checked below)."""


def batch(seed: int, rows: int = 9, width: int = 8) -> dict[str, Any]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, width + 1, (rows,), generator=g)
    lengths[0] = 0
    mask = (torch.arange(width)[None, :] < lengths[:, None]).to(torch.float64)
    rollout = -torch.rand(rows, width, generator=g, dtype=torch.float64) * 3.0
    old = rollout + (torch.rand(rows, width, generator=g, dtype=torch.float64) - 0.5) * 1.6
    old[1, 0] += 3.0  # one large ratio, one tiny
    old[2, 0] -= 3.0
    logp = old + (torch.rand(rows, width, generator=g, dtype=torch.float64) - 0.5) * 0.4
    advantages = torch.randn(rows, 1, generator=g, dtype=torch.float64).expand(rows, width).clone()
    return {"log_probs": logp, "old": old, "rollout": rollout, "mask": mask, "advantages": advantages}


def threshold(mode: str) -> str:
    return THRESHOLDS[mode]


@pytest.mark.parametrize("mode", REJECTION_MODES)
def test_each_rejection_criterion_is_verls(mode: str) -> None:
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_rejection_mask

    for seed in range(3):
        data = batch(seed)
        expected, metrics = compute_rollout_rejection_mask(
            data["old"] - data["rollout"], data["mask"], rollout_rs=mode, rollout_rs_threshold=threshold(mode)
        )
        keep, mine = rejection_mask(data["old"], data["rollout"], data["mask"], parse_rejection(mode, threshold(mode)))
        assert torch.equal(keep * data["mask"], expected)
        assert mine["rollout_rs/masked_fraction"] == pytest.approx(metrics["rollout_rs_masked_fraction"], abs=1e-9)
        assert mine["rollout_rs/seq_masked_fraction"] == pytest.approx(
            metrics["rollout_rs_seq_masked_fraction"], abs=1e-9
        )


def test_the_thresholds_reject_some_and_keep_some() -> None:
    """The parity above means something only if each criterion both keeps and rejects tokens here."""
    data = batch(0)
    for mode in REJECTION_MODES:
        keep, _ = rejection_mask(data["old"], data["rollout"], data["mask"], parse_rejection(mode, threshold(mode)))
        kept = float((keep * data["mask"]).sum())
        assert 0 < kept < float(data["mask"].sum()), mode


def test_chained_criteria_and_a_bare_k1_bound_are_verls() -> None:
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_rejection_mask

    data = batch(5)
    for modes, spec in (("token_k1,seq_mean_k3", "0.6_1.8,1.5"), ("token_k1", "1.8"), ("seq_max_k2,token_k3", "2")):
        expected, _ = compute_rollout_rejection_mask(data["old"] - data["rollout"], data["mask"], modes, spec)
        keep, _ = rejection_mask(data["old"], data["rollout"], data["mask"], parse_rejection(modes, spec))
        assert torch.equal(keep * data["mask"], expected), modes


@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize("spec", [2.0, "0.5_2.0"])
def test_importance_weights_truncated_or_icepop_are_verls(level: str, spec: Any) -> None:
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_weights

    data = batch(2)
    expected, _ = compute_rollout_correction_weights(data["old"] - data["rollout"], data["mask"], level, spec)
    lower = 0.5 if isinstance(spec, str) else None
    weights = truncated_is_weights(data["old"], data["rollout"], data["mask"], level, 2.0, lower)
    assert torch.allclose(weights, expected, atol=1e-12, rtol=0)
    if lower is not None and level == "token":
        assert bool(((weights == 0) & (data["mask"] > 0)).any())  # IcePop zeroed some tokens


@pytest.mark.parametrize("agg_mode", ["token-mean", "seq-mean-token-mean"])
def test_the_loss_with_rejection_and_icepop_is_verls_loss_on_verls_mask(agg_mode: str) -> None:
    from verl.trainer.ppo.core_algos import get_policy_loss_fn
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_rejection_mask
    from verl.workers.config.actor import ActorConfig

    data = batch(3)
    proto, mask, _ = compute_rollout_correction_and_rejection_mask(
        data["old"], data["rollout"], data["mask"], "token", "0.5_2.0", False, "seq_mean_k3", "1.5"
    )
    config = ActorConfig(strategy="fsdp", ppo_mini_batch_size=4, ppo_micro_batch_size_per_gpu=1, rollout_n=1)
    logp = data["log_probs"].clone().requires_grad_(True)
    expected, _ = get_policy_loss_fn("vanilla")(
        data["old"], logp, data["advantages"], mask, agg_mode, config, proto.batch["rollout_is_weights"]
    )
    mine_logp = data["log_probs"].clone().requires_grad_(True)
    loss, metrics = compute_policy_loss(
        "vanilla",
        log_probs=mine_logp,
        old_log_probs=data["old"],
        advantages=data["advantages"],
        response_mask=data["mask"],
        rollout_log_probs=data["rollout"],
        agg_mode=agg_mode,
        tis_mode="token",
        tis_cap=2.0,
        tis_lower=0.5,
        rollout_rs="seq_mean_k3",
        rollout_rs_threshold="1.5",
    )
    assert float(loss.detach()) == pytest.approx(float(expected.detach()), abs=1e-9)
    (grad,) = torch.autograd.grad(expected, logp)
    (mine,) = torch.autograd.grad(loss, mine_logp)
    assert torch.allclose(grad, mine, atol=1e-9)
    assert 0 < metrics["rollout_rs/masked_fraction"] < 1


def test_entropy_bonus_is_verls_subtraction() -> None:
    """verl's actor: policy loss minus entropy_coeff times the entropy aggregated as the loss is."""
    from verl.trainer.ppo.core_algos import agg_loss, get_policy_loss_fn
    from verl.workers.config.actor import ActorConfig

    data = batch(4)
    entropy = torch.rand_like(data["old"]) * 2.0
    config = ActorConfig(strategy="fsdp", ppo_mini_batch_size=4, ppo_micro_batch_size_per_gpu=1, rollout_n=1)
    pg, _ = get_policy_loss_fn("vanilla")(
        data["old"], data["log_probs"], data["advantages"], data["mask"], "token-mean", config, None
    )
    expected = pg - 0.01 * agg_loss(entropy, data["mask"], "token-mean")
    loss, metrics = compute_policy_loss(
        "vanilla",
        log_probs=data["log_probs"],
        old_log_probs=data["old"],
        advantages=data["advantages"],
        response_mask=data["mask"],
        entropy=entropy,
        entropy_coeff=0.01,
    )
    assert float(loss.detach()) == pytest.approx(float(expected.detach()), abs=1e-9)
    assert metrics["entropy_bonus"] == pytest.approx(float((entropy * data["mask"]).sum() / data["mask"].sum()))
