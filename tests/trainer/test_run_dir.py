"""A run directory has one owner, keeps files rllm did not write, and stays inside ``runs/``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rllm.cli.main import main
from rllm.config import load_config
from rllm.errors import RunDirLockedError
from rllm.experimental.unified_trainer import UnifiedTrainer
from rllm.trainer.logging import METRICS_FILE, read_metrics
from rllm.trainer.rundir import LOCK_FILE, RunDirectory

SMALL = [
    "--no-progress",
    "rllm.trainer.logger=[jsonl]",
    "rllm.trainer.total_batches=2",
    "rllm.trainer.test_freq=0",
    "rllm.trainer.val_before_train=false",
    "rllm.data.train_batch_size=2",
    "rllm.rollout.n=2",
]


def _one_error_line(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("rllm train: error: ")
    return lines[0]


def test_a_locked_run_directory_is_refused_naming_the_holder(tmp_path: Path, capsys) -> None:
    run_dir = tmp_path / "run"
    holder = RunDirectory(run_dir, [])
    holder.acquire()  # stands in for a training process (the reliability suite uses two real ones)
    try:
        assert (run_dir / LOCK_FILE).read_text().strip() == str(os.getpid())
        assert main(["train", *SMALL, f"rllm.trainer.output_dir={run_dir}"]) == 2
        line = _one_error_line(capsys.readouterr().err)
        assert f"is in use by another rllm run (pid {os.getpid()})" in line
        assert not (run_dir / METRICS_FILE).exists() and not (run_dir / "checkpoints").exists()
    finally:
        holder.release()
    assert main(["train", *SMALL, f"rllm.trainer.output_dir={run_dir}"]) == 0  # free again


def test_the_lock_is_held_for_the_whole_run_and_released_after(make_config) -> None:
    trainer = UnifiedTrainer(None, make_config("rllm.trainer.total_batches=1"), progress=False)
    seen: list[str] = []
    on_train_start = trainer.backend.on_train_start

    async def probe(state) -> None:
        try:
            RunDirectory(trainer.output_dir, []).acquire()
        except RunDirLockedError as exc:
            seen.append(str(exc))
        await on_train_start(state)

    trainer.backend.on_train_start = probe  # type: ignore[method-assign]
    try:
        trainer.fit()
    finally:
        trainer.shutdown()
    assert len(seen) == 1 and f"pid {os.getpid()}" in seen[0]
    after = RunDirectory(trainer.output_dir, [])
    after.acquire()  # released when fit() returned
    after.release()


@pytest.mark.parametrize("mode", ["disable", "auto"])
def test_files_rllm_did_not_write_are_refused_and_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys, mode: str
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "notes.txt").write_text("my notes\n")
    (tmp_path / METRICS_FILE).write_text('{"my": "metrics"}\n')
    code = main(["train", *SMALL, "rllm.trainer.output_dir=.", f"rllm.trainer.resume_mode={mode}"])
    assert code == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "already holds 'checkpoints', 'metrics.jsonl', which rllm did not write" in line
    assert (tmp_path / "checkpoints" / "notes.txt").read_text() == "my notes\n"
    assert (tmp_path / METRICS_FILE).read_text() == '{"my": "metrics"}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoints", METRICS_FILE]  # not even a lock file


def test_disable_removes_only_what_rllm_wrote(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    args = ["train", *SMALL, f"rllm.trainer.output_dir={run_dir}", "rllm.episode_logging.log_episodes=true"]
    assert main(args) == 0
    assert sorted(p.name for p in (run_dir / "episodes" / "train").iterdir()) == [
        "step_000001-000.jsonl",
        "step_000002-000.jsonl",
    ]
    mine = [run_dir / "checkpoints" / "notes.txt", run_dir / "episodes" / "train" / "notes.txt", run_dir / "mine.txt"]
    for path in mine:
        path.write_text("mine\n")
    assert main([*args, "rllm.trainer.resume_mode=disable", "rllm.trainer.total_batches=1"]) == 0
    assert all(path.read_text() == "mine\n" for path in mine)
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["latest", "notes.txt", "step_1"]
    assert sorted(p.name for p in (run_dir / "episodes" / "train").iterdir()) == ["notes.txt", "step_000001-000.jsonl"]
    assert [r["step"] for r in read_metrics(run_dir / METRICS_FILE)] == [1]


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("experiment_name", "../.."),
        ("experiment_name", ".."),
        ("experiment_name", "a/b"),
        ("project_name", "/tmp/elsewhere"),
        ("project_name", "a\\b"),
        ("experiment_name", "''"),
    ],
)
def test_run_names_stay_inside_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys, key: str, value: str
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["train", *SMALL, f"rllm.trainer.{key}={value}"]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert f"rllm.trainer.{key}=" in line and "is not a plain name" in line
    assert list(tmp_path.iterdir()) == []  # refused before anything is written


@pytest.mark.parametrize("command", ["config", "train"])
@pytest.mark.parametrize("key", ["project_name", "experiment_name"])
def test_a_run_name_longer_than_a_file_name_is_refused_at_config_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys, command: str, key: str
) -> None:
    """300 bytes (and 128 two-byte letters, 256 bytes) exceed a file name's 255: refused by name, nothing written."""
    monkeypatch.chdir(tmp_path)
    words = SMALL if command == "train" else SMALL[1:]
    for name, size in (("a" * 300, 300), ("é" * 128, 256)):
        assert main([command, *words, f"rllm.trainer.{key}={name}"]) == 2
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1 and err.startswith(f"rllm {command}: error: "), err
        assert f"rllm.trainer.{key} is {size} bytes long" in err and "at most 255 bytes" in err
    assert list(tmp_path.iterdir()) == []
    assert main(["config", *SMALL[1:], f"rllm.trainer.{key}={'a' * 255}"]) == 0  # the longest name that fits


def test_episode_logs_default_to_the_run_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    trainers = [
        UnifiedTrainer(None, load_config(overrides=[f"rllm.trainer.experiment_name={name}"]), progress=False)
        for name in ("a.1", "b")
    ]
    for trainer in trainers:
        trainer.shutdown()
    assert [t.rllm_config.episode_logging.episode_log_dir for t in trainers] == [
        "runs/rllm/a.1/episodes",
        "runs/rllm/b/episodes",
    ]


def test_an_unknown_resume_mode_is_refused_before_anything_is_written(tmp_path: Path, capsys) -> None:
    run_dir = tmp_path / "run"
    assert main(["train", *SMALL, f"rllm.trainer.output_dir={run_dir}", "rllm.trainer.resume_mode=sometimes"]) == 2
    assert "rllm.trainer.resume_mode must be one of auto, disable; got 'sometimes'" in _one_error_line(
        capsys.readouterr().err
    )
    assert not run_dir.exists()
