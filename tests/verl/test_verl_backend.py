"""``rllm.backend=verl``: its refusals at each door, one update equal to the transformers backend's through the
trainer's stages, and ``rllm train`` learning the digit task on the CPU (verl's worker on gloo, rollouts in process).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from extras import skip_module_without

skip_module_without("torch", "transformers", "safetensors", install="pip install 'rllm[verl,transformers]' (CI does)")

from safetensors.torch import load_file

from rllm.config import load_config
from rllm.errors import ConfigError
from rllm.trainer import UnifiedTrainer

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "reliability"))
from test_trainer_runs import _comparable, _error_line, _records, _steps

RUNNER = Path(__file__).with_name("backend_run.py")
LOSSES = [("vanilla", "token-mean"), ("gspo", "seq-mean-token-mean")]
TOLERANCE = 1e-5
WEIGHTS = 5e-5
"""Updated weights: Adam's first step turns a gradient's rounding near 0 into a step of up to about 6e-6 (measured
in tests/verl/test_worker.py); a wrong update differs by about the learning rate (3e-3)."""
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "RLLM_DISABLED_PLUGINS": "fast", "MPLBACKEND": "Agg"}


# -- refusals: before any model or worker is built, one line naming the key ------------------------------------------
REFUSED = [
    (
        "rllm.algorithm.rollout_correction.off_policy_mask_threshold=0.5",
        "rllm.algorithm.rollout_correction.off_policy_mask_threshold=0.5",
    ),
]


@pytest.mark.parametrize(("override", "named"), REFUSED)
def test_what_the_harness_does_not_cover_is_refused_by_name(tmp_path: Path, override: str, named: str) -> None:
    config = load_config(overrides=["rllm.backend=verl", override, f"rllm.trainer.output_dir={tmp_path}"])
    with pytest.raises(ConfigError) as caught:
        UnifiedTrainer(None, config, progress=False)
    message = str(caught.value)
    assert named in message and "verl backend" in message and "\n" not in message, message


def test_cuda_without_a_gpu_is_refused_by_its_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    overrides = ["rllm.backend=verl", "rllm.verl.device=cuda", f"rllm.trainer.output_dir={tmp_path}"]
    config = load_config(overrides=overrides)
    with pytest.raises(ConfigError, match=r"^rllm\.verl\.device=cuda, but torch sees no CUDA device.*device=cpu\.$"):
        UnifiedTrainer(None, config, progress=False)


def test_rllm_train_refuses_cuda_without_a_gpu_in_one_line(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "rllm.cli.main", "train", "--no-progress", "rllm.backend=verl"]
    command += ["rllm.verl.device=cuda", f"rllm.trainer.output_dir={tmp_path}"]
    env = {**ENV, "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert "rllm.verl.device=cuda, but torch sees no CUDA device" in _error_line(done)


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("rllm.verl.actor.optim.betas=[0.9,0.99]", "rllm.verl.actor.optim.betas"),
        ("rllm.verl.rollout.n=4", "rllm.verl.rollout.n"),
    ],
)
def test_keys_the_section_does_not_have_are_refused(override: str, named: str) -> None:
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        load_config(overrides=["rllm.backend=verl", override])


def test_the_transformers_section_is_refused_in_a_verl_run(tmp_path: Path) -> None:
    config = load_config(
        overrides=["rllm.backend=verl", "rllm.transformers.lr=0.1", f"rllm.trainer.output_dir={tmp_path}"]
    )
    with pytest.raises(ConfigError, match=r"rllm\.transformers\.lr=0\.1 configures the transformers backend"):
        UnifiedTrainer(None, config, progress=False)


@pytest.mark.parametrize(("override", "named"), REFUSED)
def test_rllm_train_refuses_in_one_line(tmp_path: Path, override: str, named: str) -> None:
    command = [sys.executable, "-m", "rllm.cli.main", "train", "--no-progress", "rllm.backend=verl"]
    command += [override, f"rllm.trainer.output_dir={tmp_path}"]
    done = subprocess.run(command, capture_output=True, text=True, env=ENV, timeout=300)
    line = _error_line(done)
    assert done.returncode != 0 and named in line and "verl backend" in line, line


# -- one update through the trainer path equals the transformers backend's -------------------------------------------
def _run(tmp: Path, backend: str, **spec: Any) -> Path:
    out = tmp / backend
    out.mkdir()
    spec = {"backend": backend, "out": str(out), "losses": LOSSES, **spec}
    (tmp / f"{backend}.json").write_text(json.dumps(spec))
    command = [sys.executable, str(RUNNER), str(tmp / f"{backend}.json")]
    done = subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    return out


@pytest.fixture(scope="module")
def updates() -> Iterator[dict[str, Path]]:
    """Each backend's update on the same batch (a directory of its own: pytest prunes its old base directories)."""
    with tempfile.TemporaryDirectory(prefix="rllm-verl-backend-") as name:
        yield {backend: _run(Path(name), backend) for backend in ("transformers", "verl")}


@pytest.mark.slow
@pytest.mark.parametrize(("loss", "mode"), LOSSES)
def test_one_update_through_the_verl_backend_is_the_transformers_backends(
    updates: dict[str, Path], loss: str, mode: str
) -> None:
    expected, got = (json.loads((updates[b] / f"{loss}.json").read_text()) for b in ("transformers", "verl"))
    for key in ("actor/loss", "actor/grad_norm"):
        assert abs(got[key] - expected[key]) <= TOLERANCE * abs(expected[key]), (key, got[key], expected[key])
    assert got["actor/tokens"] == expected["actor/tokens"] == 5 + 7 + 2 + 4 + 6 + 4  # every response token, both turns
    before, after = (load_file(str(updates[b] / f"{loss}.safetensors")) for b in ("transformers", "verl"))
    assert float((after.pop("old_log_probs") - before.pop("old_log_probs")).abs().max()) <= TOLERANCE
    moved = max(float((before[k] - after[k]).abs().max()) for k in before)
    assert moved <= WEIGHTS, moved


# -- ppo_epochs and mini-batches: the transformers backend's passes, shuffles and optimizer steps ---------------------
@pytest.fixture(scope="module")
def epoch_updates() -> Iterator[dict[str, Path]]:
    """2 passes over the batch's 5 rows in mini-batches of 3 and 2 rows: 4 optimizer steps on each backend."""
    overrides = {
        "transformers": ["rllm.transformers.ppo_epochs=2", "rllm.transformers.mini_batches=2"],
        "verl": ["rllm.verl.actor.ppo_epochs=2", "rllm.verl.actor.ppo_mini_batch_size=3"],
    }
    with tempfile.TemporaryDirectory(prefix="rllm-verl-epochs-") as name:
        yield {
            backend: _run(Path(name), backend, losses=[("vanilla", "token-mean")], overrides=overrides[backend])
            for backend in ("transformers", "verl")
        }


@pytest.mark.slow
def test_epochs_and_mini_batches_on_verl_are_the_transformers_backends(epoch_updates: dict[str, Path]) -> None:
    """The later steps are off-policy (clipping acts): their mean loss, gradient norm, clipped fraction and the
    weights after all four equal the transformers backend's (measured: weights 1.7e-5 apart)."""
    expected, got = (json.loads((epoch_updates[b] / "vanilla.json").read_text()) for b in ("transformers", "verl"))
    assert expected["actor/pg_clipfrac"] > 0.1  # the passes after the first moved the policy
    for key in ("actor/loss", "actor/grad_norm", "actor/pg_clipfrac", "actor/ppo_kl"):
        assert abs(got[key] - expected[key]) <= TOLERANCE * abs(expected[key]), (key, got[key], expected[key])
    before, after = (load_file(str(epoch_updates[b] / "vanilla.safetensors")) for b in ("transformers", "verl"))
    assert max(float((before[k] - after[k]).abs().max()) for k in before) <= WEIGHTS


# -- per-role losses and rollout correction: one optimizer step over every loss group ---------------------------------
ROUTED = ["rllm.algorithm.loss_fn_map={judge: cispo}"]
CORRECTED = [
    "rllm.algorithm.rollout_correction.tis_mode=token",
    "rllm.algorithm.rollout_correction.rollout_rs=token_k1",
    "rllm.algorithm.rollout_correction.rollout_rs_threshold=0.5_2.0",
]
BYPASS = ["rllm.algorithm.rollout_correction.bypass_mode=true", "rllm.algorithm.rollout_correction.tis_mode=sequence"]
ROUTED_LOSSES = [
    ("vanilla", "token-mean", ROUTED),  # the roles' losses share the mini-batch's token count
    ("gspo", "seq-mean-token-mean", ROUTED + CORRECTED),  # ... and its row count; with the correction too
    ("cispo", "token-mean", CORRECTED),  # truncated IS weights, and rejection out of the loss and its normaliser
    ("dppo_tv", "token-mean", BYPASS),  # the sampler's log-probs are the old policy's
]


@pytest.fixture(scope="module")
def routed_updates() -> Iterator[dict[str, Path]]:
    """Each backend's update on the batch of two roles (``solver``, ``judge``) whose steps carry sampler log-probs
    unlike the model's; one trainer per entry of :data:`ROUTED_LOSSES`."""
    spec = {"losses": ROUTED_LOSSES, "roles": ["solver", "judge"], "sampler": True}
    with tempfile.TemporaryDirectory(prefix="rllm-verl-routed-") as name:
        yield {backend: _run(Path(name), backend, **spec) for backend in ("transformers", "verl")}


@pytest.mark.slow
@pytest.mark.parametrize("loss", [entry[0] for entry in ROUTED_LOSSES])
def test_role_losses_and_rollout_correction_on_verl_are_the_transformers_backends(
    routed_updates: dict[str, Path], loss: str
) -> None:
    expected, got = (json.loads((routed_updates[b] / f"{loss}.json").read_text()) for b in ("transformers", "verl"))
    for key in ("actor/loss", "actor/grad_norm"):
        assert abs(got[key] - expected[key]) <= TOLERANCE * abs(expected[key]), (key, got[key], expected[key])
    if loss != "dppo_tv":  # bypass: the sampler is the old policy
        assert expected["actor/rollout_logprob_diff"] > 0.5  # the sampler is far from the old policy
    before, after = (load_file(str(routed_updates[b] / f"{loss}.safetensors")) for b in ("transformers", "verl"))
    assert float((after.pop("old_log_probs") - before.pop("old_log_probs")).abs().max()) <= TOLERANCE
    assert max(float((before[k] - after[k]).abs().max()) for k in before) <= WEIGHTS


@pytest.mark.slow
def test_the_routed_and_corrected_batches_engage_what_they_test(routed_updates: dict[str, Path]) -> None:
    """Without these the parity above could hold where the roles' losses, the weights or the rejection change
    nothing: the judge's loss is not the solver's, some tokens are rejected and some kept, bypass's old policy is
    the sampler (its clipped ratios are many)."""
    routed = json.loads((routed_updates["transformers"] / "vanilla.json").read_text())
    assert abs(routed["actor/judge/loss"] - routed["actor/solver/loss"]) > 1e-2, routed
    corrected = json.loads((routed_updates["transformers"] / "cispo.json").read_text())
    assert 0 < corrected["actor/rollout_rs/masked_fraction"] < 1, corrected
    bypass = load_file(str(routed_updates["verl"] / "dppo_tv.safetensors"))["old_log_probs"]
    scored = load_file(str(routed_updates["verl"] / "vanilla.safetensors"))["old_log_probs"]
    assert float((bypass - scored).abs().max()) > 0.5  # the sampler's log-probs, not the worker's


@pytest.mark.slow
def test_two_ranks_give_the_one_rank_update_with_roles_and_rejection(routed_updates: dict[str, Path]) -> None:
    """Each loss group is DP-padded on its own, and rejection's loss mask must stay empty on the padding rows: under
    torchrun the routed and corrected update is the one rank's (one trainer: torchrun runs one per process)."""
    out = routed_updates["verl"].parent / "two"
    out.mkdir()
    spec = {"backend": "verl", "out": str(out), "losses": ROUTED_LOSSES[1:2], "roles": ["solver", "judge"]}
    (out.parent / "two.json").write_text(json.dumps({**spec, "sampler": True}))
    port = ["--master_addr", "127.0.0.1", "--master_port", str(_free_port())]
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", *port, str(RUNNER)]
    done = subprocess.run(
        [*command, str(out.parent / "two.json")], env=ENV, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr[-4000:]
    for loss, _, _ in ROUTED_LOSSES[1:2]:
        one, two = (json.loads((where / f"{loss}.json").read_text()) for where in (routed_updates["verl"], out))
        for key in ("actor/loss", "actor/grad_norm"):
            assert abs(two[key] - one[key]) <= TOLERANCE * abs(one[key]), (loss, key, two[key], one[key])


# -- the reference policy on verl's ref worker: the KL loss, the KL in the reward, the entropy bonus ----------------
KL = [
    "rllm.algorithm.use_kl_loss=true",
    "rllm.algorithm.kl_loss_coef=0.5",
    "rllm.algorithm.use_kl_in_reward=true",
    "rllm.algorithm.entropy_coeff=0.01",
]


@pytest.fixture(scope="module")
def kl_updates() -> Iterator[dict[str, Path]]:
    """Two steps of each backend on the same batch with the KL loss, the KL in the reward and the entropy bonus."""
    with tempfile.TemporaryDirectory(prefix="rllm-verl-kl-") as name:
        spec = {"losses": [("vanilla", "token-mean")], "overrides": KL, "steps": 2}
        yield {backend: _run(Path(name), backend, **spec) for backend in ("transformers", "verl")}


@pytest.mark.slow
def test_the_kl_to_the_reference_is_0_before_the_first_update(kl_updates: dict[str, Path]) -> None:
    """The reference is the initial policy: at step 1 the policy scores the batch as the reference does."""
    got = json.loads((kl_updates["verl"] / "vanilla.json").read_text())
    assert got["actor/kl_loss"] == 0.0 and got["kl_in_reward/kl"] == 0.0, got
    assert got["actor/kl_coef"] == 0.5 and got["kl_in_reward/coef"] == 0.001, got


@pytest.mark.slow
@pytest.mark.parametrize("step", ["vanilla.json", "vanilla-2.json"])
def test_the_kl_and_entropy_terms_on_verl_are_the_transformers_backends(kl_updates: dict[str, Path], step: str) -> None:
    """After one update the policy has moved from the reference (a KL well above rounding), and the second step's KL
    loss, KL in the reward, entropy bonus, loss and gradient norm are the transformers backend's."""
    expected, got = (json.loads((kl_updates[b] / step).read_text()) for b in ("transformers", "verl"))
    keys = ("actor/loss", "actor/grad_norm", "actor/kl_loss", "actor/entropy_bonus", "kl_in_reward/kl")
    for key in (*keys, "kl_in_reward/penalty", "actor/pg_clipfrac", "actor/ppo_kl"):
        assert abs(got[key] - expected[key]) <= TOLERANCE * max(abs(expected[key]), 1e-6), (key, got[key], expected)
    if step == "vanilla-2.json":
        assert got["actor/kl_loss"] > 1e-3 and abs(got["kl_in_reward/kl"]) > 1e-3, got


# -- rllm train learns ---------------------------------------------------------------------------------------------
def _train(run_dir: Path, *overrides: str, timeout: int = 900) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "rllm.cli.main", "train", "--no-progress", "rllm.backend=verl"]
    command += ["rllm.trainer.logger=[jsonl]", f"rllm.trainer.output_dir={run_dir}", *overrides]
    return subprocess.run(command, capture_output=True, text=True, env=ENV, timeout=timeout)


def _pass_at_1(run_dir: Path) -> list[float]:
    return [r["val/digit_max/pass@1"] for r in _records(run_dir, "val")]


KL_RUN = ("rllm.algorithm.use_kl_loss=true", "rllm.algorithm.kl_loss_coef=0.01", "rllm.algorithm.use_kl_in_reward=true")


@pytest.mark.slow
@pytest.mark.parametrize("kl", [False, True], ids=["plain", "kl"])
def test_rllm_train_on_verl_learns_the_digit_task(tmp_path: Path, kl: bool) -> None:
    """30 steps of 20 tasks x 16 rollouts on verl's worker: greedy pass@1 from chance to 0.9 and over (measured at
    steps 0, 10, 20 and 30, seed 0: 0.0, 0.75, 0.95, 0.96). With the KL loss and the KL in the reward on verl's ref
    worker it is still learnt (0.0, 0.81, 0.89, 0.96; both runs together about 27 s), and the KL grows from 0 as the
    policy leaves its reference."""
    done = _train(
        tmp_path,
        "rllm.data.train_batch_size=20",
        "rllm.rollout.n=16",
        "rllm.trainer.total_batches=30",
        "rllm.trainer.test_freq=10",
        *(KL_RUN if kl else ()),
    )
    assert done.returncode == 0, done.stderr[-4000:]
    curve = _pass_at_1(tmp_path)
    assert curve[0] <= 0.3 and curve[-1] >= 0.9, curve
    assert (tmp_path / "checkpoints" / "step_30" / "model" / "model.safetensors").is_file()
    if kl:
        losses = [r["actor/kl_loss"] for r in _records(tmp_path, "train")]
        assert losses[0] == 0.0 and losses[-1] > 0.1, losses


@pytest.mark.slow
def test_a_resumed_run_gives_the_uninterrupted_metrics(tmp_path: Path) -> None:
    """The worker's weights and AdamW state go through the checkpoint: 2 steps, then 2 more from it, are 4 steps."""
    run = ("rllm.trainer.total_batches=4", "rllm.trainer.save_freq=2", "rllm.trainer.test_freq=0")
    clean = _train(tmp_path / "clean", *run)
    assert clean.returncode == 0, clean.stderr[-4000:]
    first = _train(tmp_path / "resumed", *run[1:], "rllm.trainer.total_batches=2")
    assert first.returncode == 0, first.stderr[-4000:]
    second = _train(tmp_path / "resumed", *run)
    assert second.returncode == 0, second.stderr[-4000:]
    assert _steps(tmp_path / "resumed") == [1, 2, 3, 4]

    def same(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in r.items() if not k.startswith("perf/")} for r in _comparable(records)]

    assert same(_records(tmp_path / "resumed")) == same(_records(tmp_path / "clean"))


@pytest.mark.slow
def test_two_ranks_under_torchrun_give_the_one_rank_metrics(tmp_path: Path) -> None:
    """Each rank rolls out its share (the transformers backend's split) and the worker shards the update over gloo."""
    run = (
        "rllm.data.train_batch_size=4",
        "rllm.rollout.n=4",
        "rllm.trainer.total_batches=3",
        "rllm.trainer.test_freq=3",
    )
    one = _train(tmp_path / "one", *run)
    assert one.returncode == 0, one.stderr[-4000:]
    port = ["--master_addr", "127.0.0.1", "--master_port", str(_free_port())]
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", *port, "-m", "rllm.cli.main"]
    command += ["train", "--no-progress", "rllm.backend=verl", "rllm.trainer.logger=[jsonl]", *run]
    two = subprocess.run(
        [*command, f"rllm.trainer.output_dir={tmp_path / 'two'}"], capture_output=True, text=True, env=ENV, timeout=900
    )
    assert two.returncode == 0, two.stderr[-4000:]
    for kind in ("train", "val"):
        ones, twos = _records(tmp_path / "one", kind), _records(tmp_path / "two", kind)
        assert [r["step"] for r in ones] == [r["step"] for r in twos] and ones
        for a, b in zip(ones, twos, strict=True):
            keys = [
                k for k, v in a.items() if isinstance(v, float) and not k.startswith(("perf/", "time/", "wall_time"))
            ]
            # The sampler-vs-worker log-prob gap is rounding (1e-7) in both layouts: bounded, not compared relatively.
            gaps = [k for k in keys if k == "actor/rollout_logprob_diff"]
            assert all(a[k] <= TOLERANCE and b[k] <= TOLERANCE for k in gaps), (a, b)
            same = [k for k in keys if k not in gaps]
            assert same and all(abs(a[k] - b[k]) <= TOLERANCE * max(abs(a[k]), 1e-6) for k in same), (a, b)


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_without_verl_the_backend_names_itself_and_its_extras(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util
    import sys

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "verl" else real(name, *a))
    monkeypatch.delitem(sys.modules, "rllm_verl.backend", raising=False)
    with pytest.raises(ConfigError, match=r"^rllm\.backend=verl needs verl: pip install 'rllm\[verl,transformers\]'"):
        importlib.import_module("rllm_verl.backend")
