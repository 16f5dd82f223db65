"""TRL's off-policy sequence mask (``off_policy_mask_threshold``) against TRL 1.16's own function.

TRL drops a sequence whose advantage is negative and whose mean KL from the sampler exceeds the
threshold, and keeps counting it in the loss's normaliser. Runs where trl is installed (CI does).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch==2.13.0+cpu)")
pytest.importorskip("trl", reason="trl is not installed here: pip install trl==1.16.0 (CI does)")

from rllm.losses import compute_policy_loss  # noqa: E402
from rllm.losses.correction import off_policy_sequence_mask  # noqa: E402


def batch(seed: int, rows: int = 12, width: int = 6) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, width + 1, (rows,), generator=g)
    mask = (torch.arange(width)[None, :] < lengths[:, None]).to(torch.float64)
    sampler = -torch.rand(rows, width, generator=g, dtype=torch.float64) * 3.0
    current = sampler + (torch.rand(rows, width, generator=g, dtype=torch.float64) - 0.7) * 0.8
    sampler[3, 0] = float("nan")  # a token the sampler could not score: no KL evidence
    advantages = torch.randn(rows, 1, generator=g, dtype=torch.float64)
    return {"mask": mask, "sampler": sampler, "current": current, "advantages": advantages}


@pytest.mark.parametrize("seed", range(3))
def test_the_mask_is_trls(seed: int) -> None:
    from trl import GRPOTrainer

    data = batch(seed)
    expected = GRPOTrainer.get_off_policy_mask(
        data["advantages"], data["current"], data["sampler"], data["mask"], off_policy_threshold=0.1
    )
    width = data["mask"].shape[1]
    mine = off_policy_sequence_mask(
        data["advantages"].expand(-1, width), data["current"], data["sampler"], data["mask"], 0.1
    )
    assert torch.equal(mine, expected)
    assert 0 < float(expected.sum()) < len(expected)  # some dropped, some kept


def test_the_loss_drops_those_sequences_and_keeps_the_normaliser() -> None:
    """The loss with the mask equals the loss on the kept sequences over the whole batch's token count."""
    from trl import GRPOTrainer

    data = batch(1)
    width = data["mask"].shape[1]
    advantages = data["advantages"].expand(-1, width).clone()
    sampler = torch.nan_to_num(data["sampler"], nan=-1.0)
    kept = GRPOTrainer.get_off_policy_mask(data["advantages"], data["current"], sampler, data["mask"], 0.1)
    common = {
        "log_probs": data["current"],
        "old_log_probs": data["current"].detach(),
        "advantages": advantages,
        "rollout_log_probs": sampler,
    }
    loss, metrics = compute_policy_loss("vanilla", response_mask=data["mask"], off_policy_mask_threshold=0.1, **common)
    expected, _ = compute_policy_loss(
        "vanilla", response_mask=data["mask"] * kept, batch_num_tokens=data["mask"].sum(), **common
    )
    # on policy the ratio is 1: the loss is minus the kept tokens' advantages over all tokens
    by_hand = -float((advantages * data["mask"] * kept).sum() / data["mask"].sum())
    assert float(loss) == pytest.approx(float(expected), abs=1e-12)
    assert float(loss) == pytest.approx(by_hand, abs=1e-12)
    assert metrics["off_policy_masked_fraction"] == pytest.approx(1 - float(kept.mean()))
