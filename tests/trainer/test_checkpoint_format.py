"""Checkpoints hold data (JSON, npz without objects) checked against a manifest; bad ones are named, never run."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import pickle
from pathlib import Path

import numpy as np
import pytest

from rllm.errors import CheckpointError, CorruptCheckpointError
from rllm.experimental.unified_trainer import UnifiedTrainer
from rllm.trainer.checkpoint import MANIFEST, CheckpointManager
from rllm.trainer.logging import METRICS_FILE, read_metrics
from rllm.trainer.protocol import TrainerState
from rllm.trainer.rejection import RejectionSamplingState
from rllm.trainer.rejection_state import decode_rejection_state, decode_value, encode_rejection_state, encode_value
from rllm.types import Episode, Step, TerminationReason, Trajectory, TrajectoryGroup

FOUR_STEPS = ("rllm.trainer.total_batches=4", "rllm.trainer.save_freq=1", "rllm.trainer.test_freq=0")


class _Payload:
    """Unpickling this creates ``marker``: the proof that a checkpoint file was executed."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (Path.touch, (self.marker,))


def _fit(config) -> UnifiedTrainer:
    trainer = UnifiedTrainer(None, config, progress=False)
    try:
        trainer.fit()
    finally:
        trainer.shutdown()
    return trainer


def _steps(run_dir: Path) -> list[int]:
    return [r["step"] for r in read_metrics(run_dir / METRICS_FILE) if r["kind"] == "train"]


def test_a_checkpoint_is_json_and_arrays_listed_in_its_manifest(make_config) -> None:
    run_dir = _fit(make_config(*FOUR_STEPS)).output_dir
    step = run_dir / "checkpoints" / "step_4"
    manifest = json.loads((step / MANIFEST).read_text())
    assert (manifest["format"], manifest["version"]) == ("rllm-checkpoint", 2)
    files = sorted(p.name for p in step.iterdir())
    assert files == sorted([MANIFEST, *manifest["files"]])
    assert sorted(manifest["files"]) == [
        "embedded.json",
        "estimators.json",
        "policy.json",
        "policy.npz",
        "rejection_state.json",
        "sampling.json",
        "trainer.json",
    ]
    for name, entry in manifest["files"].items():
        data = (step / name).read_bytes()
        assert entry == {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        if name.endswith(".json"):
            json.loads(data)
    with np.load(step / "policy.npz", allow_pickle=False) as arrays:  # would raise on an object array
        assert arrays["weights"].dtype == np.float64


def test_values_round_trip_as_tagged_json_and_code_is_refused() -> None:
    value = {
        "t": (1, "a", None),
        "f": [float("nan"), float("inf"), -float("inf"), 0.5],
        "a": np.arange(6, dtype=np.int32).reshape(2, 3),
        "n": np.float32(1.5),
        "k": {1: "int key", "$x": "tag-like key"},
        "r": TerminationReason.TIMEOUT,
        "b": True,
    }
    text = json.dumps(encode_value(value, "v"), allow_nan=False)  # strict JSON, no NaN literals
    back = decode_value(json.loads(text))
    assert back["t"] == (1, "a", None) and back["k"] == {1: "int key", "$x": "tag-like key"}
    assert np.isnan(back["f"][0]) and back["f"][1:] == [float("inf"), -float("inf"), 0.5]
    assert back["a"].dtype == np.int32 and back["a"].tolist() == [[0, 1, 2], [3, 4, 5]]
    assert type(back["n"]) is np.float32 and back["n"] == 1.5
    assert back["r"] is TerminationReason.TIMEOUT and back["b"] is True
    with pytest.raises(CheckpointError, match=r"v\['x'\]\[1\] holds a builtin_function_or_method.*mode"):
        encode_value({"x": [1, print]}, "v")


def test_rejection_state_round_trips_with_shared_trajectories() -> None:
    shared = Trajectory(uid="t0", name="solver", steps=[Step(prompt_ids=[1], response_ids=[2], logprobs=[-0.5])])
    other = Trajectory(uid="t1", name="solver", reward=1.0, info={"score": (1, 2)})
    state = RejectionSamplingState(
        groups=[TrajectoryGroup.for_task("task:a", "solver", [shared, other], metadata=[{"task_id": "task:a"}])],
        episodes=[Episode(id="task:a:0", termination_reason=TerminationReason.ENV_DONE, trajectories=[shared])],
        partial_tasks=1,
        batches=2,
    )
    back = decode_rejection_state(json.loads(json.dumps(encode_rejection_state(state))))
    assert back.groups == state.groups and back.episodes == state.episodes
    assert (back.partial_tasks, back.batches) == (1, 2)
    assert back.groups[0].trajectories[0] is back.episodes[0].trajectories[0]  # one object, as before saving
    assert back.groups[0].group_task_id == "task:a"


def test_episode_mode_state_survives_a_checkpoint(make_config) -> None:
    config = make_config(
        *FOUR_STEPS,
        "rllm.rejection_sample.enable=true",
        "rllm.rejection_sample.mode=episode",
        "rllm.rejection_sample.min_partial_solve_tasks=100000",  # never released: everything accumulates
        "rllm.data.train_batch_size=2",
        "rllm.rollout.n=2",
    )
    trainer = UnifiedTrainer(None, config, progress=False)
    state = TrainerState(rs_state=RejectionSamplingState())
    try:
        trainer.fit()
        path, skipped = trainer.checkpoints.resume(state, trainer.backend)
    finally:
        trainer.shutdown()
    assert path is not None and path.name == "step_4" and skipped == []
    assert state.rs_state.batches == 4 and len(state.rs_state.groups) > 0
    assert {id(t) for g in state.rs_state.groups for t in g.trajectories} == {
        id(t) for e in state.rs_state.episodes for t in e.trajectories
    }


def test_a_planted_pickle_is_never_run(make_config, tmp_path: Path) -> None:
    trainer = _fit(make_config(*FOUR_STEPS))
    marker = tmp_path / "payload-ran"
    (trainer.output_dir / "checkpoints" / "step_4" / "rejection_state.pkl").write_bytes(pickle.dumps(_Payload(marker)))
    _fit(make_config(*FOUR_STEPS[1:], "rllm.trainer.total_batches=6"))
    assert not marker.exists()
    assert _steps(trainer.output_dir) == [1, 2, 3, 4, 5, 6]


def test_an_object_array_in_a_consistent_checkpoint_is_refused_not_unpickled(
    make_config, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trainer = _fit(make_config(*FOUR_STEPS))
    marker = tmp_path / "payload-ran"
    step = trainer.output_dir / "checkpoints" / "step_4"
    np.savez(step / "policy.npz", weights=np.array([_Payload(marker)], dtype=object))
    manifest = json.loads((step / MANIFEST).read_text())  # an attacker who also fixes the manifest
    data = (step / "policy.npz").read_bytes()
    manifest["files"]["policy.npz"] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (step / MANIFEST).write_text(json.dumps(manifest))
    capsys.readouterr()
    _fit(make_config(*FOUR_STEPS[1:], "rllm.trainer.total_batches=6"))  # falls back to step 3, like any damage
    warning = capsys.readouterr().err.splitlines()[0]
    assert "step_4" in warning and "allow_pickle" in warning and warning.endswith("Resuming from it.")
    assert not marker.exists()


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-10])


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("damage", "target", "message"),
    [
        (_truncate, "policy.npz", r"step_4/policy.npz' has \d+ bytes where \d+ were written"),
        (_flip, "trainer.json", r"step_4/trainer.json' is corrupt \(its sha256 differs"),
        (Path.unlink, "rejection_state.json", r"step_4/rejection_state.json' is missing"),
        (Path.unlink, MANIFEST, r"step_4' has no MANIFEST.json"),
        (_truncate, MANIFEST, r"step_4/MANIFEST.json' is unreadable or truncated"),
    ],
)
def test_a_damaged_checkpoint_is_named_and_the_run_resumes_from_the_newest_intact_one(
    make_config, capsys: pytest.CaptureFixture[str], damage, target: str, message: str
) -> None:
    trainer = _fit(make_config(*FOUR_STEPS))
    run_dir = trainer.output_dir
    damage(run_dir / "checkpoints" / "step_4" / target)
    state = TrainerState(rs_state=RejectionSamplingState())
    with pytest.raises(CorruptCheckpointError, match=message + r".*newest intact earlier checkpoint is .*step_3'"):
        trainer.checkpoints.load(run_dir / "checkpoints" / "step_4", state, trainer.backend)
    assert state.global_step == 0  # nothing restored from a checkpoint that failed its check

    capsys.readouterr()
    _fit(make_config(*FOUR_STEPS[1:], "rllm.trainer.total_batches=6"))
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and err[0].startswith("rllm: warning: Checkpoint") and err[0].endswith("Resuming from it.")
    assert err[1].endswith("step_3 (step 3).")
    assert _steps(run_dir) == [1, 2, 3, 4, 5, 6]  # step 4 trained again, once


def test_a_foreign_format_checkpoint_with_no_intact_one_before_it_is_an_error(make_config) -> None:
    trainer = _fit(make_config(*FOUR_STEPS, "rllm.trainer.max_checkpoints=1"))
    checkpoints = trainer.output_dir / "checkpoints"
    manifest = json.loads((checkpoints / "step_4" / MANIFEST).read_text())
    (checkpoints / "step_4" / MANIFEST).write_text(json.dumps({**manifest, "version": 99}))
    with pytest.raises(
        CorruptCheckpointError,
        match=r"MANIFEST.json' describes \('rllm-checkpoint', 99\); this rllm reads 'rllm-checkpoint' 1 or 2; "
        r"no earlier checkpoint is intact; set rllm.trainer.resume_mode=disable",
    ):
        _fit(make_config(*FOUR_STEPS[1:], "rllm.trainer.total_batches=6"))
    assert sorted(p.name for p in checkpoints.iterdir()) == ["latest", "step_4"]  # nothing deleted


def test_a_write_failure_names_the_checkpoint_and_keeps_the_previous_one(make_config, monkeypatch) -> None:
    trainer = _fit(make_config(*FOUR_STEPS))
    manager: CheckpointManager = trainer.checkpoints

    def full(directory: Path) -> None:
        (directory / "policy.npz").write_bytes(b"half")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(directory / "policy.npz"))

    monkeypatch.setattr(trainer.backend, "save_checkpoint", full)
    with pytest.raises(CheckpointError, match=r"Cannot write checkpoint .*step_5': No space left on device") as info:
        manager.save(TrainerState(global_step=5, rs_state=RejectionSamplingState()), trainer.backend)
    assert "step_4' is intact" in str(info.value) and "\n" not in str(info.value)
    assert sorted(p.name for p in manager.root.iterdir()) == ["latest", "step_2", "step_3", "step_4"]
    assert manager.problem(manager.root / "step_4") is None


def test_several_damaged_checkpoints_are_skipped_in_one_warning_line(make_config, capsys) -> None:
    run_dir = _fit(make_config(*FOUR_STEPS)).output_dir
    _flip(run_dir / "checkpoints" / "step_4" / "policy.npz")
    (run_dir / "checkpoints" / "step_3" / "trainer.json").unlink()
    capsys.readouterr()
    _fit(make_config(*FOUR_STEPS[1:], "rllm.trainer.total_batches=5"))
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("rllm: warning: Checkpoint file") and "step_4/policy.npz' is corrupt" in err[0]
    assert err[0].endswith(
        "earlier checkpoint is "
        + repr(str(run_dir / "checkpoints" / "step_2"))
        + ". Resuming from it (1 more unusable)."
    )
    assert _steps(run_dir) == [1, 2, 3, 4, 5]


def _tamper(step: Path, name: str, change) -> None:
    """Rewrite one JSON file of a checkpoint and fix its manifest entry, as a careful attacker would."""
    data = json.loads((step / name).read_text())
    (step / name).write_text(json.dumps(change(data)))
    manifest = json.loads((step / MANIFEST).read_text())
    raw = (step / name).read_bytes()
    manifest["files"][name] = {"size": len(raw), "sha256": hashlib.sha256(raw).hexdigest()}
    (step / MANIFEST).write_text(json.dumps(manifest))


@pytest.mark.parametrize(
    ("name", "change", "message"),
    [
        ("trainer.json", lambda d: {**d, "global_step": -3}, "global_step=-3"),
        ("trainer.json", lambda d: {**d, "global_step": 1e30}, "global_step=1e+30"),
        ("trainer.json", lambda d: {**d, "global_step": 3}, "global_step 3 in step_4"),
        ("trainer.json", lambda d: {**d, "epoch": "zero"}, "epoch='zero'"),
        ("trainer.json", lambda d: {**d, "batches_done": 40}, "more batches or epochs"),
        ("sampling.json", lambda d: {**d, "cursor": -1}, "dynamic-sampling state"),
        ("rejection_state.json", lambda d: {**d, "groups": [7]}, "cannot read"),
        ("embedded.json", lambda d: {k: v for k, v in d.items() if k != "sample_rng"}, "backend cannot load"),
    ],
)
def test_a_tampered_checkpoint_with_a_consistent_manifest_falls_back_with_one_warning(
    make_config, capsys: pytest.CaptureFixture[str], name: str, change, message: str
) -> None:
    run_dir = _fit(make_config(*FOUR_STEPS)).output_dir
    _tamper(run_dir / "checkpoints" / "step_4", name, change)
    capsys.readouterr()
    _fit(make_config(*FOUR_STEPS[1:], "rllm.trainer.total_batches=6"))
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and err[0].startswith("rllm: warning: ") and err[0].endswith("Resuming from it."), err
    assert message in err[0] and "step_4" in err[0]
    assert err[1].endswith("step_3 (step 3).")
    assert _steps(run_dir) == [1, 2, 3, 4, 5, 6]


@pytest.mark.parametrize("save_freq, saved", [(0, []), (3, ["step_3", "step_4"])])
def test_save_freq_zero_writes_no_checkpoint_and_the_last_step_is_saved_otherwise(
    make_config, save_freq: int, saved: list[str]
) -> None:
    config = make_config(
        "rllm.trainer.total_batches=4", f"rllm.trainer.save_freq={save_freq}", "rllm.trainer.test_freq=0"
    )
    checkpoints = _fit(config).output_dir / "checkpoints"
    assert sorted(p.name for p in checkpoints.glob("step_*")) == saved
