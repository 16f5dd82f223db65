"""rllm_verl's CPU platform for verl (opt-in, version-gated), the row conversion to verl's worker batch, and the
worker's loss checks (no model is built here)."""

from __future__ import annotations

import importlib.metadata

import pytest
from extras import skip_module_without

skip_module_without("torch", install="pip install torch==2.13.0+cpu 'rllm[verl]' (CI does)")

import torch

from rllm.errors import PluginError, RLLMWarning, TrainerError
from rllm_verl.cpu_platform import TESTED_VERL, check_verl_version, register_cpu_platform
from rllm_verl.rows import from_responses, to_verl_batch


def test_the_platform_is_registered_only_when_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VERL_PLATFORM", raising=False)
    assert register_cpu_platform() is False
    monkeypatch.setenv("VERL_PLATFORM", "cpu")
    assert register_cpu_platform() is True
    from verl.plugin.platform import PlatformRegistry

    platform = PlatformRegistry.get("cpu")()
    assert (platform.device_name, platform.communication_backend_name(), platform.current_device()) == (
        "cpu",
        "gloo",
        "cpu",
    )
    module = platform.device_module
    assert module.max_memory_allocated() == 0 and module.memory_reserved() == 0 and module.mem_get_info() == (0, 0)
    assert module.is_available() and module.device_count() == 1
    assert register_cpu_platform() is True  # again: the same class stays registered
    assert PlatformRegistry.get("cpu").__module__ == "rllm_verl.cpu_platform"


def test_an_untested_verl_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    assert check_verl_version() in TESTED_VERL
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.10.2")
    monkeypatch.setenv("VERL_PLATFORM", "cpu")
    refused = r"tested with verl 0\.9\.1, not the installed verl 0\.10\.2; install verl==0\.9\.1"
    with pytest.raises(PluginError, match=refused):
        register_cpu_platform()


def _rows() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Two right-padded rows: [p p r r o r] (two turns, an observation between) and [p r r] (pad 0)."""
    ids = torch.tensor([[11, 12, 21, 22, 31, 23], [13, 24, 25, 0, 0, 0]])
    attention = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0]])
    mask = torch.tensor([[0, 1, 1, 0, 1], [1, 1, 0, 0, 0]], dtype=torch.float32)  # mask[j]: token j + 1
    return ids, attention, mask


def test_rows_become_verls_left_and_right_padded_blocks() -> None:
    ids, attention, mask = _rows()
    advantages = torch.tensor([[0, 0.5, 0.5, 0, 0.75], [-1, -1, 0, 0, 0]])
    batch, layout = to_verl_batch(ids, attention, mask, {"advantages": advantages}, pad_id=0)
    assert batch["prompts"].tolist() == [[11, 12], [0, 13]]
    assert batch["responses"].tolist() == [[21, 22, 31, 23], [24, 25, 0, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1, 1, 1], [0, 1, 1, 1, 0, 0]]
    assert batch["position_ids"].tolist() == [[0, 1, 2, 3, 4, 5], [0, 0, 1, 2, 2, 2]]
    assert batch["response_mask"].tolist() == [[1, 1, 0, 1], [1, 1, 0, 0]]
    assert batch["advantages"].tolist() == [[0.5, 0.5, 0, 0.75], [-1, -1, 0, 0]]
    back = from_responses(torch.tensor([[1.0, 2, 3, 4], [5, 6, 0, 0]]), layout)
    assert back.tolist() == [[0, 1, 2, 3, 4], [5, 6, 0, 0, 0]]


def test_dp_padding_repeats_the_first_row_without_loss() -> None:
    ids, attention, mask = _rows()
    batch, layout = to_verl_batch(ids, attention, mask, {}, pad_id=0, multiple=4)
    assert layout.rows == 4 and batch["input_ids"].shape[0] == 4
    assert batch["responses"][2:].tolist() == [[21, 22, 31, 23]] * 2
    assert batch["response_mask"][2:].sum() == 0 and batch["response_mask"][:2].sum() == 5


def test_dp_padding_rows_keep_an_empty_loss_mask_when_the_loss_has_its_own() -> None:
    """Rollout rejection gives the loss its own mask (a per-token ``response_mask``): the padding rows, copies of row
    0, must not take row 0's mask with them, or they would add row 0's loss again on another rank."""
    ids, attention, mask = _rows()
    counted = mask.clone()
    counted[0, 1] = 0  # a rejected token: the first of row 0's response
    batch, _ = to_verl_batch(ids, attention, mask, {"response_mask": counted, "advantages": mask}, 0, multiple=4)
    assert batch["response_mask"].tolist() == [[0, 1, 0, 1], [1, 1, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]
    assert batch["advantages"][2:].sum() == 0


def test_a_row_without_a_response_token_is_one_line() -> None:
    ids, attention, mask = _rows()
    mask[1] = 0
    with pytest.raises(TrainerError, match="Row 1 of the batch has no response token"):
        to_verl_batch(ids, attention, mask, {}, pad_id=0)


def test_the_workers_loss_is_checked_by_rllm_and_carried_by_verlsactor_config(monkeypatch: pytest.MonkeyPatch) -> None:
    from rllm.losses import registry
    from rllm_verl.worker_settings import WorkerOptions, actor_config

    monkeypatch.setattr(registry, "_ANNOUNCED", set())  # the warning is said once per process; say it here

    config = actor_config(WorkerOptions(loss="gspo", loss_options={"clip_ratio_high": 0.28}))
    assert (config.policy_loss.loss_mode, config.loss_agg_mode, config.clip_ratio_high) == (
        "rllm.gspo",
        "token-mean",
        0.28,
    )
    with pytest.warns(RLLMWarning, match="fixes its own aggregation, seq-mean-token-mean"):
        assert actor_config(WorkerOptions(loss="geo_mean")).loss_agg_mode == "seq-mean-token-mean"
    assert actor_config(WorkerOptions(loss="dro", loss_options={"dro_beta": 0.3})).policy_loss.dro_beta == 0.3


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"loss": "gspo", "loss_options": {"clip_ratio_hi": 0.3}}, "Loss 'gspo' .* has no option 'clip_ratio_hi'"),
        ({"loss": "vanilla", "loss_agg_mode": "prompt-mean"}, "loss_agg_mode='prompt-mean' needs each sequence's"),
        (
            {"loss": "trl.grpo", "loss_agg_mode": "seq-mean-token-mean", "loss_options": {"epsilon": 0.2}},
            "'epsilon' has no place in verl's",
        ),
    ],
)
def test_a_loss_the_worker_cannot_carry_is_one_line(options: dict, message: str) -> None:
    from rllm.errors import ConfigError
    from rllm_verl.worker_settings import WorkerOptions, actor_config

    with pytest.raises(ConfigError, match=message):
        actor_config(WorkerOptions(**options))
