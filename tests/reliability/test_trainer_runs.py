"""Reliability probes of ``rllm train``: real processes, real files, real signals, a real full disk.

They guard against checkpoints that can run code, run directories without a single owner,
and write errors that surface as tracebacks or lose data. Probes per class (20 in all):

- data loss (9): a second trainer on a busy run directory is refused while the first keeps
  every step, with ``resume_mode=auto`` and with ``disable`` (2); ten SIGKILLs at seeded
  random points, then a resume whose metrics and episode logs hold every step exactly once
  and equal an uninterrupted run's, with no scratch left behind (1); three SIGKILLs of a run
  whose estimator (``ema_baseline``) and dynamic sampler keep state across steps, resumed to
  the uninterrupted run's metrics, estimator state, refill position and policy (1); an old-format
  checkpoint skipped for the newest intact one (1); a full disk while metrics are rewritten,
  while a checkpoint is written and while metric lines are appended, and a read-only file
  system, each keeping the previous checkpoint intact and the run resumable (4).
- security (4): a pickle planted as ``rejection_state.pkl`` in the newest checkpoint, and
  one in an old-format checkpoint, never run; an object array behind a consistent manifest
  is refused, not unpickled; no module under ``core/`` or ``plugins/`` imports pickle,
  cloudpickle or dill or loads arrays with ``allow_pickle``.
- traceback (7): the refused second trainer (2), the refused object array (1), the three
  full-disk failures and the read-only file system (4) each end with exactly one
  ``rllm train: error:`` line and exit status 2.

Runtime: 27 s of CPU time for some 26 ``rllm train`` processes (plus about 8 s for the five of
the stateful probe) (each starts in about
0.5 s; completed runs also draw their learning curve), measured at 63-76 s wall time on two
cores shared at a load average of 4-6; the processes run one at a time (two at most), so
an idle machine needs about the CPU time. The disk probes mount a 1 MiB tmpfs, which needs
root; elsewhere they are skipped, saying why.
"""

from __future__ import annotations

import ast
import json
import os
import pickle
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
# The numpy estimator path: the same numbers, without compiling numba kernels in each of ~25 processes.
ENV = {
    **os.environ,
    "PYTHONUNBUFFERED": "1",
    "MPLBACKEND": "Agg",
    "RLLM_DISABLED_PLUGINS": "fast",
}  # no numba start-up per process
SMALL = [
    "rllm.trainer.logger=[jsonl]",
    "rllm.data.train_batch_size=2",
    "rllm.rollout.n=2",
]
EMBEDDED_SMALL = "rllm.embedded.n_features=256"
"""The embedded backend's smaller policy; another backend's run refuses the embedded section's keys."""


def _command(run_dir: Path, *overrides: str) -> list[str]:
    other_backend = any(o.startswith("rllm.backend=") and o != "rllm.backend=embedded" for o in overrides)
    return [
        sys.executable,
        "-m",
        "rllm.cli.main",
        "train",
        "--no-progress",
        *SMALL,
        *(() if other_backend else (EMBEDDED_SMALL,)),
        f"rllm.trainer.output_dir={run_dir}",
        *overrides,
    ]


def _train(run_dir: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(_command(run_dir, *overrides), env=ENV, capture_output=True, text=True, timeout=120)


def _records(run_dir: Path, kind: str = "train") -> list[dict]:
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # the torn last line of a killed writer
        if record["kind"] == kind:
            out.append(record)
    return out


def _steps(run_dir: Path, kind: str = "train") -> list[int]:
    return [r["step"] for r in _records(run_dir, kind)]


def _comparable(records: list[dict]) -> list[dict]:
    """Metrics without wall-clock times, which differ between any two runs."""
    return [{k: v for k, v in r.items() if not k.startswith("time/") and k != "wall_time"} for r in records]


def _error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The run failed with exit 2 and exactly one error line, no traceback; returns that line."""
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("rllm train: error: ")]
    assert len(errors) == 1 and result.stderr.splitlines()[-1] == errors[0], result.stderr
    return errors[0]


def _intact(run_dir: Path, step: int) -> bool:
    """Whether checkpoint ``step`` passes rllm's own manifest check."""
    from rllm.trainer.checkpoint import CheckpointManager

    manager = CheckpointManager(run_dir / "checkpoints", {})
    return manager.problem(run_dir / "checkpoints" / f"step_{step}") is None


# -- data loss and traceback: one owner per run directory --------------------------------------
def test_a_second_trainer_is_refused_while_the_first_keeps_every_step(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    first = subprocess.Popen(
        _command(run_dir, "rllm.trainer.total_batches=30", "rllm.trainer.save_freq=5", "rllm.trainer.test_freq=0"),
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not _steps(run_dir) and time.monotonic() < deadline and first.poll() is None:
        time.sleep(0.02)
    first.send_signal(signal.SIGSTOP)  # hold the first run mid-training while the second one tries
    try:
        assert _steps(run_dir), "the first trainer never wrote a step"
        for mode in ("auto", "disable"):
            second = _train(run_dir, "rllm.trainer.total_batches=30", f"rllm.trainer.resume_mode={mode}")
            assert f"is in use by another rllm run (pid {first.pid})" in _error_line(second)
    finally:
        first.send_signal(signal.SIGCONT)
    _, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    assert _steps(run_dir) == list(range(1, 31))


# -- data loss: SIGKILL at random points, then resume ------------------------------------------
TOTAL, KILLS = 90, 10  # ten kills advance at most ~50 steps: every one hits a run in progress
KILL_RUN = (
    f"rllm.trainer.total_batches={TOTAL}",
    "rllm.trainer.save_freq=3",
    "rllm.trainer.test_freq=10",
    "rllm.episode_logging.log_episodes=true",
)


def _episodes(run_dir: Path) -> dict[str, list[dict]]:
    """Every episode file of the run, its episodes without wall-clock durations and random trajectory and step ids."""
    files = {}
    for path in sorted((run_dir / "episodes").rglob("*.jsonl")):
        episodes = [json.loads(line) for line in path.read_text().splitlines()]
        for episode in episodes:
            episode["info"].pop("workflow_seconds")
            for trajectory in episode["trajectories"]:
                trajectory.pop("uid")
                for step in trajectory.get("steps", []):
                    step.pop("id", None)  # a fresh uuid per step, like the trajectory uid
        files[path.relative_to(run_dir / "episodes").as_posix()] = episodes
    return files


def _kill_repeatedly(
    run_dir: Path, run: Sequence[str], rng: random.Random, kills: int, ahead: tuple[int, int]
) -> list[int]:
    """Start the run ``kills`` times, SIGKILL it each time a few steps (``ahead``) further on; the steps reached."""
    reached = []
    for _ in range(kills):
        target = max(_steps(run_dir), default=0) + rng.randint(*ahead)
        process = subprocess.Popen(_command(run_dir, *run), env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        while max(_steps(run_dir), default=0) < target and process.poll() is None:
            assert time.monotonic() < deadline, "no progress"
            time.sleep(0.005)
        time.sleep(rng.uniform(0, 0.02))  # land anywhere: mid-step, mid-validation, mid-checkpoint
        process.send_signal(signal.SIGKILL)
        _, err = process.communicate()
        assert process.returncode == -signal.SIGKILL, err.decode()
        reached.append(max(_steps(run_dir)))
    return reached


def test_ten_sigkills_then_resume_give_every_step_once_as_an_uninterrupted_run(tmp_path: Path) -> None:
    killed_dir, clean_dir = tmp_path / "killed", tmp_path / "clean"
    clean = subprocess.Popen(_command(clean_dir, *KILL_RUN), env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    kill_steps = _kill_repeatedly(killed_dir, KILL_RUN, random.Random(11), KILLS, (1, 3))
    assert kill_steps[-1] < TOTAL  # every kill hit a run in progress

    resumed = _train(killed_dir, *KILL_RUN)
    assert resumed.returncode == 0, resumed.stderr
    _, err = clean.communicate(timeout=120)
    assert clean.returncode == 0, err
    assert _steps(killed_dir) == list(range(1, TOTAL + 1))
    assert _steps(killed_dir, "val") == list(range(0, TOTAL + 1, 10))
    assert _comparable(_records(killed_dir)) == _comparable(_records(clean_dir))
    assert _comparable(_records(killed_dir, "val")) == _comparable(_records(clean_dir, "val"))
    killed_episodes = _episodes(killed_dir)
    assert sorted(killed_episodes) == [f"train/step_{s:06d}-000.jsonl" for s in range(1, TOTAL + 1)] + [
        f"val/step_{s:06d}-000.jsonl" for s in range(0, TOTAL + 1, 10)
    ]
    assert killed_episodes == _episodes(clean_dir)
    left = sorted(p.name for p in (killed_dir / "checkpoints").iterdir())
    # no half-written or orphaned checkpoint
    assert left == ["latest", f"step_{TOTAL - 6}", f"step_{TOTAL - 3}", f"step_{TOTAL}"]
    scratch = [p for p in killed_dir.rglob("*") if p.name.endswith(".tmp") or "partial-" in p.name]
    assert scratch == []  # nor the temporary file of any interrupted write

    again = _train(killed_dir, *KILL_RUN)
    assert again.returncode == 0 and f"already complete ({TOTAL} steps)" in again.stderr
    assert _steps(killed_dir) == list(range(1, TOTAL + 1))


# -- data loss: state kept across steps by the estimator and the sampler ------------------------
STATEFUL_TOTAL = 40
STATEFUL_RUN = (
    f"rllm.trainer.total_batches={STATEFUL_TOTAL}",
    "rllm.trainer.save_freq=2",
    "rllm.trainer.test_freq=10",
    "rllm.rollout.n=4",
    "rllm.algorithm.adv_estimator=ema_baseline",
    "rllm.algorithm.estimator_options.decay=0.8",
    "rllm.dynamic_sampling.enable=true",
    "rllm.dynamic_sampling.max_rounds=3",
)


def test_sigkilled_stateful_run_resumes_to_the_uninterrupted_result(tmp_path: Path) -> None:
    """ema_baseline's per-task baselines and dynamic sampling's refill position survive three SIGKILLs."""
    killed_dir, clean_dir = tmp_path / "killed", tmp_path / "clean"
    clean = subprocess.Popen(
        _command(clean_dir, *STATEFUL_RUN), env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    kills = _kill_repeatedly(killed_dir, STATEFUL_RUN, random.Random(5), 3, (3, 8))
    assert kills[-1] < STATEFUL_TOTAL

    resumed = _train(killed_dir, *STATEFUL_RUN)
    assert resumed.returncode == 0, resumed.stderr
    assert "rllm: resumed from" in resumed.stderr
    _, err = clean.communicate(timeout=120)
    assert clean.returncode == 0, err

    killed, uninterrupted = _records(killed_dir), _records(clean_dir)
    assert [r["step"] for r in killed] == list(range(1, STATEFUL_TOTAL + 1))
    assert _comparable(killed) == _comparable(uninterrupted)
    assert _comparable(_records(killed_dir, "val")) == _comparable(_records(clean_dir, "val"))
    assert sum(r["sampling/rounds"] > 1 for r in killed) > 5  # the sampler really refilled batches
    final = Path("checkpoints") / f"step_{STATEFUL_TOTAL}"
    for name in ("estimators.json", "sampling.json"):
        assert (killed_dir / final / name).read_bytes() == (clean_dir / final / name).read_bytes()
    baselines = json.loads((killed_dir / final / "estimators.json").read_text())["ema_baseline"]["solver"]
    assert len(baselines["baselines"]) >= 30  # the state really carried many tasks across the kills
    with np.load(killed_dir / final / "policy.npz") as a, np.load(clean_dir / final / "policy.npz") as b:
        assert sorted(a.files) == sorted(b.files)
        assert all(np.array_equal(a[name], b[name]) for name in a.files)


# -- security: checkpoints are data ------------------------------------------------------------
class _Payload:
    """Unpickling this runs ``touch marker``: the proof that a file was executed."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (os.system, (f"touch {self.marker}",))


def test_planted_pickles_never_run_and_an_old_format_checkpoint_is_skipped(tmp_path: Path) -> None:
    run_dir, marker = tmp_path / "run", tmp_path / "payload-ran"
    first = _train(run_dir, "rllm.trainer.total_batches=4", "rllm.trainer.save_freq=2", "rllm.trainer.test_freq=0")
    assert first.returncode == 0, first.stderr
    payload = pickle.dumps(_Payload(marker))
    (run_dir / "checkpoints" / "step_4" / "rejection_state.pkl").write_bytes(payload)
    old = run_dir / "checkpoints" / "step_99"  # the layout of rllm before checkpoints had a manifest
    old.mkdir()
    (old / "trainer.json").write_text(json.dumps({"global_step": 99, "epoch": 0, "batches_done": 0}))
    (old / "rejection_state.pkl").write_bytes(payload)

    resumed = _train(run_dir, "rllm.trainer.total_batches=6", "rllm.trainer.save_freq=2", "rllm.trainer.test_freq=0")
    assert resumed.returncode == 0, resumed.stderr
    assert not marker.exists()
    warning = [line for line in resumed.stderr.splitlines() if line.startswith("rllm: warning:")]
    assert len(warning) == 1 and "step_99' has no MANIFEST.json" in warning[0], resumed.stderr
    assert "newest intact earlier checkpoint is" in warning[0] and "step_4'" in warning[0]
    assert _steps(run_dir) == [1, 2, 3, 4, 5, 6]


def test_an_object_array_behind_a_consistent_manifest_is_refused(tmp_path: Path) -> None:
    import hashlib

    import numpy as np

    run_dir, marker = tmp_path / "run", tmp_path / "payload-ran"
    first = _train(run_dir, "rllm.trainer.total_batches=2", "rllm.trainer.test_freq=0")
    assert first.returncode == 0, first.stderr
    step = run_dir / "checkpoints" / "step_2"
    np.savez(step / "policy.npz", weights=np.array([_Payload(marker)], dtype=object))
    manifest = json.loads((step / "MANIFEST.json").read_text())
    data = (step / "policy.npz").read_bytes()
    manifest["files"]["policy.npz"] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (step / "MANIFEST.json").write_text(json.dumps(manifest))
    line = _error_line(_train(run_dir, "rllm.trainer.total_batches=3", "rllm.trainer.test_freq=0"))
    assert "step_2" in line and "allow_pickle" in line
    assert not marker.exists()


def test_no_module_imports_pickle() -> None:
    banned = {"pickle", "cPickle", "_pickle", "cloudpickle", "dill", "shelve", "joblib"}
    found = []
    sources = [p for root in ("core", "plugins") for p in (REPO / root).rglob("*.py") if "build" not in p.parts]
    assert len(sources) > 20  # the scan really sees the code
    for path in sources:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) in (
                "import_module",
                "__import__",
            ):
                names = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            found += [f"{path.relative_to(REPO)}:{node.lineno} {n}" for n in names if n.split(".")[0] in banned]
            unpickling = isinstance(node, ast.keyword) and node.arg == "allow_pickle"
            if unpickling and not (isinstance(node.value, ast.Constant) and node.value.value is False):
                found.append(f"{path.relative_to(REPO)}:{node.value.lineno} allow_pickle not False")
    assert found == []


# -- data loss and traceback: a full disk, a read-only file system ------------------------------
@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs, unmounted afterwards; skipped where mounting is not permitted."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    try:
        mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount_point)], capture_output=True, text=True
        )
    except FileNotFoundError:
        pytest.skip("no mount command: a full disk cannot be simulated on this machine")
    if mounted.returncode != 0:
        pytest.skip(f"mounting a tmpfs is not permitted here ({mounted.stderr.strip()}): needs root")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=True)


def _fill(disk: Path, leave: int) -> Path:
    """Occupy the disk's free space but ``leave`` bytes."""
    filler = disk / "filler"
    stats = os.statvfs(disk)
    filler.write_bytes(b"\0" * max(stats.f_bavail * stats.f_frsize - leave, 0))
    return filler


def test_a_full_or_read_only_disk_is_one_line_and_keeps_the_last_checkpoint(small_disk: Path) -> None:
    run_dir = small_disk / "run"
    run = ("rllm.trainer.save_freq=2", "rllm.trainer.test_freq=0")
    first = _train(run_dir, "rllm.trainer.total_batches=4", *run)
    assert first.returncode == 0, first.stderr

    filler = _fill(small_disk, leave=0)
    metrics_before = (run_dir / "metrics.jsonl").read_bytes()
    line = _error_line(_train(run_dir, "rllm.trainer.total_batches=8", *run))
    # The resolved config.yaml is the first file a run writes (inside the lock), so it meets the full disk first.
    assert "config.yaml': No space left on device; any previous content is unchanged" in line
    assert (run_dir / "metrics.jsonl").read_bytes() == metrics_before
    assert _intact(run_dir, 4)

    filler.unlink()
    filler = _fill(small_disk, leave=24 * 1024)  # room for a few metric lines, not for a checkpoint
    line = _error_line(_train(run_dir, "rllm.trainer.total_batches=8", *run))
    assert "Cannot write checkpoint" in line and "step_6': No space left on device" in line
    assert "step_4' is intact" in line
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["latest", "step_2", "step_4"]
    assert _intact(run_dir, 4)

    # no checkpoint before the end: the disk fills up while metric lines are appended
    line = _error_line(_train(run_dir, "rllm.trainer.total_batches=60", "rllm.trainer.save_freq=100"))
    assert "metrics.jsonl': No space left on device; the last checkpoint is intact" in line
    assert _intact(run_dir, 4) and 6 < max(_steps(run_dir)) < 60

    filler.unlink()
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    try:
        line = _error_line(_train(run_dir, "rllm.trainer.total_batches=8", *run))
        assert "Read-only file system" in line
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(small_disk)], check=True)

    last = _train(run_dir, "rllm.trainer.total_batches=8", *run)
    assert last.returncode == 0, last.stderr
    assert _steps(run_dir) == list(range(1, 9))
    assert _intact(run_dir, 8)


# -- data outside the run: planted links, and checkpoints of other settings --------------------
@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A completed two-step run with checkpoints, its learning curve and metrics (copied by each probe)."""
    run_dir = tmp_path_factory.mktemp("finished") / "run"
    done = _train(run_dir, "rllm.trainer.total_batches=2", "rllm.trainer.save_freq=1", "rllm.trainer.test_freq=0")
    assert done.returncode == 0, done.stderr
    return run_dir


@pytest.mark.parametrize("name", ["config.yaml", "metrics.jsonl", "checkpoints/latest", "learning_curve.png"])
def test_a_link_planted_in_the_run_directory_is_refused_and_its_target_kept(
    finished_run: Path, tmp_path: Path, name: str
) -> None:
    import shutil

    run_dir = tmp_path / "run"
    shutil.copytree(finished_run, run_dir, symlinks=True)
    outside = tmp_path / "precious.txt"
    outside.write_text("not rllm's\n")
    (run_dir / name).unlink()
    (run_dir / name).symlink_to(outside)
    resumed = _train(run_dir, "rllm.trainer.total_batches=4", "rllm.trainer.save_freq=1", "rllm.trainer.test_freq=0")
    line = _error_line(resumed)
    assert f"holds the symbolic link {str(run_dir / name)!r}" in line and "rllm did not make" in line
    assert outside.read_text() == "not rllm's\n"
    assert (run_dir / name).is_symlink()  # the link is the user's: neither followed nor removed


@pytest.mark.parametrize(
    ("change", "key", "then", "now"),
    [
        (
            "rllm.algorithm.estimator_options={preset: verl}",
            "rllm.algorithm.estimator_options",
            "{}",
            "{'preset': 'verl'}",
        ),
        ("rllm.algorithm.norm_adv_by_std_in_grpo=false", "rllm.algorithm.norm_adv_by_std_in_grpo", "True", "False"),
        ("rllm.embedded.tasks=[digit_chain]", "rllm.embedded.tasks", "['digit_sum']", "['digit_chain']"),
        ("rllm.data.train_batch_size=3", "rllm.data.train_batch_size", "2", "3"),
    ],
)
def test_resuming_under_other_settings_is_refused_naming_the_key_and_both_values(
    finished_run: Path, tmp_path: Path, change: str, key: str, then: str, now: str
) -> None:
    import shutil

    run_dir = tmp_path / "run"
    shutil.copytree(finished_run, run_dir, symlinks=True)
    before = (run_dir / "metrics.jsonl").read_bytes()
    resumed = _train(run_dir, "rllm.trainer.total_batches=4", "rllm.trainer.test_freq=0", change)
    line = _error_line(resumed)
    assert f"{key}: {then} then, {now} now" in line, line
    assert (run_dir / "metrics.jsonl").read_bytes() == before  # the earlier experiment's metrics are untouched
