"""A backend's loss settings are checked once per run, not on every micro-batch."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="needs torch (the transformers extra)")

import rllm.losses.compute as compute  # noqa: E402
from rllm import AlgorithmConfig  # noqa: E402
from rllm.errors import LossOptionError  # noqa: E402
from rllm.losses import LossSettings, compute_policy_loss  # noqa: E402


def _batch() -> dict[str, object]:
    g = torch.Generator().manual_seed(0)
    log_probs = torch.randn(3, 4, generator=g, dtype=torch.float64)
    return {
        "log_probs": log_probs,
        "old_log_probs": log_probs + 0.1 * torch.randn(3, 4, generator=g, dtype=torch.float64),
        "advantages": torch.randn(3, 4, generator=g, dtype=torch.float64),
        "response_mask": torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]], dtype=torch.float64),
    }


def test_settings_are_resolved_once_for_many_micro_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = LossSettings.from_algorithm(AlgorithmConfig(loss_fn="ppo", eps_clip=0.3), "", "vanilla")
    calls = []
    real = compute.resolve_loss_options
    monkeypatch.setattr(compute, "resolve_loss_options", lambda *a, **k: calls.append(a) or real(*a, **k))
    batch = _batch()
    results = [settings.compute(**batch) for _ in range(4)]
    assert len(calls) == 1  # the first micro-batch checks; the other three reuse it
    direct, _ = compute_policy_loss("ppo", options={"clip_ratio": 0.3}, **batch)  # the checking door, same numbers
    assert all(float(loss) == pytest.approx(float(direct), rel=1e-12) for loss, _ in results)


def test_a_batch_is_still_checked_every_call() -> None:
    settings = LossSettings.from_algorithm(AlgorithmConfig(loss_fn="ppo"), "", "vanilla")
    batch = _batch()
    settings.compute(**batch)
    batch["advantages"] = torch.zeros(3)
    with pytest.raises(LossOptionError, match=r"advantages has shape \(3,\) but log_probs has \(3, 4\)"):
        settings.compute(**batch)
