"""LoRA in the transformers backend (``rllm.transformers.lora.*``, through peft).

The expected values come from outside the code under test: the base weights from a fresh
``load_policy`` of the same settings, the merged weights from peft's own ``merge_and_unload``,
the reference policy from a plain copy of the base model.
"""

from __future__ import annotations

import asyncio
import copy
import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from extras import skip_module_without

skip_module_without(
    "torch", "transformers", "safetensors", "peft", install="pip install 'rllm[transformers]' (CI does)"
)

import torch
from omegaconf import DictConfig, OmegaConf

from rllm.errors import CheckpointError, ConfigError
from rllm.trainer import UnifiedTrainer
from rllm.trainer.logging import METRICS_FILE, read_metrics
from rllm_transformers.batch import token_statistics
from rllm_transformers.lora import LoraSettings, add_adapters, merged_weights, trainable
from rllm_transformers.model import load_policy, tiny_model

MakeConfig = Callable[..., DictConfig]
Train = Callable[[DictConfig], tuple[UnifiedTrainer, list[dict]]]
LORA = ("rllm.transformers.lora.rank=4", "rllm.transformers.lora.alpha=8")
QWEN_VOCAB = 151_936


def _plain(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The base weights of an adapted model's state dict under the plain model's names (the adapters dropped)."""
    return {k.replace(".base_layer.", "."): v for k, v in state.items() if ".lora_" not in k}


def _peft_merged(adapted: object) -> dict[str, torch.Tensor]:
    """peft's own merge (``merge_and_unload`` on a copy): the independent expectation of the merged weights."""
    return copy.deepcopy(adapted).merge_and_unload().state_dict()  # type: ignore[attr-defined]


def _ids(vocab: int, rows: int = 3, length: int = 9, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(0, vocab, (rows, length), generator=torch.Generator().manual_seed(seed))
    return ids, torch.ones_like(ids)


@pytest.fixture
def trained(train: Train, tiny_config: MakeConfig) -> UnifiedTrainer:
    """Two LoRA steps with a KL loss (so the run has a reference policy): the adapters moved away from zero."""
    trainer, _ = train(tiny_config(*LORA, "rllm.algorithm.use_kl_loss=true", "rllm.algorithm.kl_loss_coef=0.1"))
    return trainer


# -- keys ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "override",
    [
        "rllm.transformers.lora.alpha=32",
        "rllm.transformers.lora.dropout=0.1",
        "rllm.transformers.lora.target_modules=[q_proj]",
    ],
)
def test_a_lora_key_set_while_rank_is_0_is_refused_in_one_line(tiny_config: MakeConfig, override: str) -> None:
    key = override.split("=")[0]
    with pytest.raises(ConfigError, match=rf"^{key}=.* has no effect with rllm.transformers.lora.rank=0") as info:
        UnifiedTrainer(None, tiny_config(override), progress=False)
    assert "\n" not in str(info.value)


def test_rllm_serve_refuses_a_lora_key_set_while_rank_is_0(tiny_config: MakeConfig) -> None:
    skip_module_without("fastapi", "uvicorn", install="pip install 'rllm[serve]'")
    from rllm_transformers.serve import serve

    with pytest.raises(ConfigError, match=r"^rllm.transformers.lora.alpha=32 has no effect"):
        serve(tiny_config("rllm.transformers.lora.alpha=32"), "127.0.0.1", 0)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("rllm.transformers.lora.rank=-1", r"rllm.transformers.lora.rank must be an integer >= 0; got -1"),
        ("rllm.transformers.lora.rank=four", r"rllm.transformers.lora.rank must be an integer >= 0; got 'four'"),
        ("rllm.transformers.lora.alpha=0", r"rllm.transformers.lora.alpha must be a number > 0"),
        ("rllm.transformers.lora.dropout=1.5", r"rllm.transformers.lora.dropout must be a number >= 0 and <= 0.9"),
        ("rllm.transformers.lora.ranks=4", r"rllm.transformers.lora.ranks"),
    ],
)
def test_ill_typed_or_unknown_lora_keys_are_refused(tiny_config: MakeConfig, override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        UnifiedTrainer(None, tiny_config(override), progress=False)
    assert "\n" not in str(info.value)


def test_a_target_that_names_no_linear_layer_is_refused_naming_the_models_layers(tiny_config: MakeConfig) -> None:
    config = tiny_config("rllm.transformers.lora.rank=4", "rllm.transformers.lora.target_modules=[q_proj,qkv]")
    with pytest.raises(ConfigError, match=r"names 'qkv', which is no linear layer of this model; .*down_proj, "):
        UnifiedTrainer(None, config, progress=False)


def test_without_peft_the_rank_names_the_extra_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "peft", None)
    model = torch.nn.Sequential()
    model.add_module("q_proj", torch.nn.Linear(4, 4))
    with pytest.raises(
        ConfigError, match=r"^rllm.transformers.lora.rank > 0 needs peft: pip install 'rllm\[transformers\]'"
    ):
        add_adapters(model, LoraSettings(2, 4.0, ("q_proj",), 0.0))


# -- what trains -------------------------------------------------------------------------------------
def test_the_optimizer_holds_the_adapters_only(tiny_config: MakeConfig) -> None:
    trainer = UnifiedTrainer(None, tiny_config(*LORA), progress=False)
    backend = trainer.backend
    trainer.shutdown()
    adapters = {id(p) for name, p in backend.model.named_parameters() if ".lora_" in name}
    held = [id(p) for group in backend.optimizer.param_groups for p in group["params"]]
    # 2 layers x 7 linear layers x (A, B)
    assert len(adapters) == 28 and sorted(held) == sorted(adapters)


def test_after_training_only_the_adapters_changed_and_the_base_is_bit_identical(
    trained: UnifiedTrainer, tiny_config: MakeConfig
) -> None:
    backend = trained.backend
    fresh = load_policy(tiny_config(*LORA).rllm.transformers).model.state_dict()
    base = _plain(backend.model.state_dict())
    assert base.keys() == fresh.keys()
    assert all(torch.equal(base[name], fresh[name]) for name in fresh)
    ups = [v for k, v in backend.model.state_dict().items() if ".lora_B." in k]
    assert len(ups) == 14 and all(float(v.abs().max()) > 0 for v in ups)  # peft starts B at zero


def test_with_lora_dropout_the_old_policy_log_probs_are_drawn_without_it(train: Train, tiny_config: MakeConfig) -> None:
    """The sampler's log-probs (no dropout) and the old policy's agree: stage 5 scores in eval mode, not through the
    update's forward, which draws the adapters' dropout."""
    trainer, records = train(tiny_config(*LORA, "rllm.transformers.lora.dropout=0.5"))
    assert not trainer.backend._old_policy_is_the_updates()
    gaps = [r["actor/rollout_logprob_diff"] for r in records if r["kind"] == "train"]
    assert len(gaps) == 2 and max(gaps) <= 1e-5, gaps
    _, plain = train(tiny_config(*LORA, f"rllm.trainer.output_dir={trainer.output_dir.parent / 'no_dropout'}"))
    assert [r["kind"] for r in plain] == ["train", "train"]


# -- checkpoints -------------------------------------------------------------------------------------
def test_a_checkpoint_holds_the_adapter_not_the_model_and_reloads_bit_exact(
    trained: UnifiedTrainer, tiny_config: MakeConfig
) -> None:
    step = trained.output_dir / "checkpoints" / "step_2"
    names = sorted(p.name for p in (step / "model").iterdir())
    assert "adapter_model.safetensors" in names and "model.safetensors" not in names, names
    from safetensors.torch import load_file

    held = load_file(str(step / "model" / "adapter_model.safetensors"))
    assert len(held) == 28 and all(".lora_" in name for name in held)
    assert json.loads((step / "transformers.json").read_text())["lora"]["rank"] == 4

    again = UnifiedTrainer(None, tiny_config(*LORA), progress=False)
    again.shutdown()
    again.backend.load_checkpoint(step)
    mine, theirs = trained.backend.model.state_dict(), again.backend.model.state_dict()
    assert mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in mine)
    saved, loaded = trained.backend.optimizer.state_dict()["state"], again.backend.optimizer.state_dict()["state"]
    assert all(torch.equal(saved[i]["exp_avg_sq"], loaded[i]["exp_avg_sq"]) for i in saved)


def test_resuming_two_steps_gives_four_uninterrupted_steps_bit_exact(
    train: Train, tiny_config: MakeConfig, tmp_path: Path
) -> None:
    run = (*LORA, "rllm.trainer.total_batches=4", "rllm.trainer.save_freq=2")
    clean, clean_records = train(tiny_config(*run, f"rllm.trainer.output_dir={tmp_path / 'clean'}"))
    train(tiny_config(*LORA, "rllm.trainer.total_batches=2", f"rllm.trainer.output_dir={tmp_path / 'split'}"))
    resumed, resumed_records = train(tiny_config(*run, f"rllm.trainer.output_dir={tmp_path / 'split'}"))
    mine, theirs = clean.backend.model.state_dict(), resumed.backend.model.state_dict()
    assert all(torch.equal(mine[k], theirs[k]) for k in mine)

    def comparable(records: list[dict]) -> list[dict]:
        drop = ("time/", "perf/")
        return [{k: v for k, v in r.items() if not k.startswith(drop) and k != "wall_time"} for r in records]

    train = [r for r in resumed_records if r["kind"] == "train"]  # steps 1-2 before the resume, 3-4 after it
    assert [r["step"] for r in train] == [1, 2, 3, 4]
    assert comparable(train) == comparable([r for r in clean_records if r["kind"] == "train"])


def test_checkpoints_of_the_other_kind_or_other_lora_settings_are_refused(
    trained: UnifiedTrainer, train: Train, tiny_config: MakeConfig
) -> None:
    step = trained.output_dir / "checkpoints" / "step_2"
    plain = UnifiedTrainer(None, tiny_config(), progress=False)
    plain.shutdown()
    with pytest.raises(CheckpointError, match=r"holds a LoRA adapter, not a whole model; resume it with"):
        plain.backend.load_checkpoint(step)
    other = UnifiedTrainer(
        None, tiny_config("rllm.transformers.lora.rank=4", "rllm.transformers.lora.alpha=4"), progress=False
    )
    other.shutdown()
    with pytest.raises(CheckpointError, match=r"rllm.transformers.lora.alpha=8.0 where this run gives 4.0"):
        other.backend.load_checkpoint(step)
    whole, _ = train(tiny_config(f"rllm.trainer.output_dir={trained.output_dir.parent / 'whole'}"))
    with pytest.raises(CheckpointError, match=r"holds a whole model, no LoRA adapter; resume it with .*rank=0"):
        trained.backend.load_checkpoint(whole.output_dir / "checkpoints" / "step_2")


# -- forwards: merged, unmerged, adapters off ----------------------------------------------------------
def test_merged_weights_are_peft_merge_and_forwards_agree(trained: UnifiedTrainer, tiny_config: MakeConfig) -> None:
    backend = trained.backend
    merged, expected = merged_weights(backend.model), _peft_merged(backend.adapted)
    assert merged.keys() == expected.keys()
    assert max(float((merged[k] - expected[k]).abs().max()) for k in merged) <= 1e-6
    plain = load_policy(tiny_config().rllm.transformers).model
    plain.load_state_dict(merged)
    ids, attention = _ids(15)
    with torch.no_grad():
        adapted_logits = backend.model(input_ids=ids, attention_mask=attention).logits
        merged_logits = plain(input_ids=ids, attention_mask=attention).logits
        base_logits = load_policy(tiny_config().rllm.transformers).model(input_ids=ids).logits
    assert float((adapted_logits - merged_logits).abs().max()) <= 1e-5
    assert float((adapted_logits - base_logits).abs().max()) > 1e-3  # the adapters do change the policy


def test_the_kl_reference_is_the_base_model_with_the_adapters_off(
    trained: UnifiedTrainer, tiny_config: MakeConfig
) -> None:
    backend = trained.backend
    base = load_policy(tiny_config().rllm.transformers).model.eval()
    ids, attention = _ids(15)
    with torch.no_grad():
        reference = token_statistics(backend.reference, ids, attention)[0]
        expected = token_statistics(base, ids, attention)[0]
        policy = token_statistics(backend.model, ids, attention)[0]
    assert torch.equal(reference, expected)
    assert float((policy - expected).abs().max()) > 1e-4
    after = token_statistics(backend.model, ids, attention)[0]  # the adapters are on again afterwards
    assert torch.equal(after, policy)


# -- servers and weight syncs ---------------------------------------------------------------------------
@pytest.mark.parametrize("sync", ["disk", "memory"])
def test_a_server_receives_the_merged_weights_through_the_weight_sync(
    trained: UnifiedTrainer, tiny_config: MakeConfig, tmp_path: Path, sync: str
) -> None:
    skip_module_without("fastapi", "uvicorn", install="pip install 'rllm[serve]'")
    from rllm.engine import weight_sync_for
    from rllm_transformers.serve import Server

    config = tiny_config(*LORA, f"rllm.rollout.openai.weight_sync={sync}", f"rllm.trainer.output_dir={tmp_path}")
    server = Server(load_policy(config.rllm.transformers), "tiny", 0)
    weights = weight_sync_for(config, ["http://127.0.0.1:1/v1"])

    def deliver(url: str, route: str, body: object, version: int) -> None:
        if isinstance(body, bytes):
            answer = asyncio.run(server.update_weights_in_memory(body, str(version)))
        else:
            answer = asyncio.run(server.update_weights(body))  # type: ignore[arg-type]
        assert answer["success"] and answer["weight_version"] == version

    weights.send = deliver  # type: ignore[method-assign]
    backend = trained.backend
    weights.push(backend.rollout_weights.server_update(7, None))
    got, expected = server.policy.model.state_dict(), _peft_merged(backend.adapted)
    assert got.keys() == expected.keys() and server.weight_version == 7
    assert max(float((got[k] - expected[k]).abs().max()) for k in got) <= 1e-6
    ids, attention = _ids(15)
    with torch.no_grad():
        served = server.policy.model(input_ids=ids, attention_mask=attention).logits
        adapted = backend.model(input_ids=ids, attention_mask=attention).logits
    assert float((served - adapted).abs().max()) <= 1e-5


def test_a_server_refuses_a_lora_checkpoint_in_one_line(trained: UnifiedTrainer, tiny_config: MakeConfig) -> None:
    skip_module_without("fastapi", "uvicorn", install="pip install 'rllm[serve]'")
    from rllm.engine.openai_api import RequestError
    from rllm_transformers.serve import Server

    server = Server(load_policy(tiny_config().rllm.transformers), "tiny", 0)
    step = trained.output_dir / "checkpoints" / "step_2"
    with pytest.raises(RequestError, match=r"holds a LoRA adapter .* a server takes merged weights"):
        asyncio.run(server.update_weights({"model_path": str(step)}))


def test_a_lora_checkpoint_as_the_model_to_train_or_serve_is_refused_in_one_line(
    trained: UnifiedTrainer, tiny_config: MakeConfig
) -> None:
    model_dir = trained.output_dir / "checkpoints" / "step_2" / "model"
    with pytest.raises(ConfigError, match=r"holds a LoRA adapter .*, not a whole model; give the base model") as info:
        load_policy(tiny_config(f"rllm.transformers.model={model_dir}").rllm.transformers)  # train's and serve's
    assert "\n" not in str(info.value)


def test_a_ray_worker_snapshot_holds_the_merged_weights(trained: UnifiedTrainer) -> None:
    from rllm_transformers.workers import WorkerEngine

    backend = trained.backend
    snapshot = WorkerEngine.snapshot(backend.engine)
    expected = _peft_merged(backend.adapted)
    assert snapshot.weights.keys() == expected.keys()
    assert max(float((snapshot.weights[k] - expected[k]).abs().max()) for k in expected) <= 1e-6
    assert snapshot.engine().model(input_ids=_ids(15)[0]).logits.shape[-1] == 15


# -- Qwen's vocabulary at a tiny width ---------------------------------------------------------------------
def test_at_qwens_vocabulary_only_adapters_train_and_merged_forwards_agree() -> None:
    torch.manual_seed(0)
    options = OmegaConf.create({"hidden_size": 16, "num_layers": 1})
    model = tiny_model(options, QWEN_VOCAB, pad_id=0, eos_id=1)
    base = {k: v.clone() for k, v in model.state_dict().items()}
    adapted = add_adapters(
        model, LoraSettings(4, 8.0, ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"), 0.0)
    )
    optimizer = torch.optim.AdamW(trainable(model), lr=1e-2)
    assert len(optimizer.param_groups[0]["params"]) == 14
    ids, attention = _ids(QWEN_VOCAB, rows=2, length=6)
    for _ in range(2):
        optimizer.zero_grad()
        logp = token_statistics(model, ids, attention)[0]
        (-logp.mean()).backward()
        optimizer.step()
    assert model.get_input_embeddings().weight.grad is None  # the 151,936 x 16 embedding never got a gradient
    after = _plain(model.state_dict())
    assert all(torch.equal(after[k], base[k]) for k in base)
    plain = tiny_model(options, QWEN_VOCAB, pad_id=0, eos_id=1)
    plain.load_state_dict(merged_weights(model))
    with torch.no_grad():
        unmerged = model(input_ids=ids, attention_mask=attention).logits
        merged = plain(input_ids=ids, attention_mask=attention).logits
        with adapted.disable_adapter():
            off = model(input_ids=ids, attention_mask=attention).logits
    assert merged.shape == (2, 6, QWEN_VOCAB)
    assert float((unmerged - merged).abs().max()) <= 1e-5
    assert float((unmerged - off).abs().max()) > 1e-4


# -- rollouts from a copy of the weights (asynchronous training) -------------------------------------------
def test_an_asynchronous_lora_run_at_staleness_0_gives_the_synchronous_runs_metrics(
    train: Train, tiny_config: MakeConfig, tmp_path: Path
) -> None:
    shared = (*LORA, "rllm.trainer.total_batches=3")
    _, sync = train(tiny_config(*shared, f"rllm.trainer.output_dir={tmp_path / 'sync'}"))
    _, overlapped = train(
        tiny_config(*shared, "rllm.async_training.enable=true", f"rllm.trainer.output_dir={tmp_path / 'async'}")
    )

    def numbers(records: list[dict]) -> list[dict]:
        drop = ("time/", "perf/", "async/")
        return [{k: v for k, v in r.items() if k != "wall_time" and not k.startswith(drop)} for r in records]

    assert len(sync) == 3 and numbers(overlapped) == numbers(sync)


@pytest.mark.slow
def test_a_lora_run_against_rllm_serve_trains_as_the_in_process_engine(tmp_path: Path) -> None:
    """The server, started with the run's settings, holds the base (the merged model before any update); each
    update reaches it merged through the default (disk) sync, so it samples what the in-process engine samples
    (the memory sync is checked above, in process, 85 s less)."""
    skip_module_without("fastapi", "uvicorn", install="pip install 'rllm[serve]'")
    import subprocess

    from serving import SERVED, SERVED_RUN, get_json, running

    def train(run: str, *extra: str) -> list[dict]:
        command = [sys.executable, "-m", "rllm.cli.main", "train", "--no-progress", *SERVED_RUN, *LORA]
        steps = (
            "rllm.trainer.total_batches=12",
            "rllm.trainer.test_freq=12",
            f"rllm.trainer.output_dir={tmp_path / run}",
        )
        done = subprocess.run([*command, *steps, *extra], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        return read_metrics(tmp_path / run / METRICS_FILE)

    local = train("local")
    with running(*SERVED, *LORA) as root:
        served = train("served", f"rllm.rollout.openai.base_url=[{root}/v1]")
        assert get_json(f"{root}/health")["weight_version"] == 12  # the first weights, then one update per step
    val_local = [r["val/digit_max/pass@1"] for r in local if r["kind"] == "val"]
    val_served = [r["val/digit_max/pass@1"] for r in served if r["kind"] == "val"]
    assert val_local[0] == val_served[0] and val_local[-1] > val_local[0] + 0.2, (val_local, val_served)
    assert abs(val_served[-1] - val_local[-1]) <= 0.05, (val_local, val_served)
    rewards_local = [r["reward/solver/mean"] for r in local if r["kind"] == "train"]
    rewards_served = [r["reward/solver/mean"] for r in served if r["kind"] == "train"]
    assert rewards_served[:2] == rewards_local[:2]  # the same samples after the first merged update
