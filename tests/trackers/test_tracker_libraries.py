"""The tensorboard, mlflow and wandb trackers write what each library's own reader gives back: metrics.jsonl.

One ``rllm train`` run with ``rllm.trainer.logger=[console,jsonl,tensorboard,mlflow]``; TensorBoard's event
reader and MLflow's client then return every step's metrics (TensorBoard's as the 32-bit floats it stores),
the config as hyper-parameters and the learning curve. wandb, offline, writes its run directory.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from extras import skip_module_without

skip_module_without(
    "tensorboardX",
    "tensorboard",
    "mlflow",
    "wandb",
    "matplotlib",
    install="pip install 'rllm[tensorboard,mlflow,wandb,plot]' tensorboard (CI does)",
)

from rllm.cli.main import main
from rllm.testing import parametrize_with_checks
from rllm_trackers.mlflow_tracker import mlflow_name

pytestmark = pytest.mark.slow

RUN = (
    "--no-progress",
    "rllm.trainer.total_batches=3",
    "rllm.trainer.test_freq=2",
    "rllm.data.train_batch_size=4",
    "rllm.trainer.project_name=trackers",
    "rllm.trainer.experiment_name=four",
)


def series(records: list[dict[str, Any]]) -> dict[str, list[tuple[int, float]]]:
    """Every numeric metric of metrics.jsonl as (step, value) in the order logged, by key."""
    out: dict[str, list[tuple[int, float]]] = {}
    for record in records:
        for key, value in record.items():
            if key not in ("kind", "step") and isinstance(value, int | float):
                out.setdefault(key, []).append((record["step"], float(value)))
    return out


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("four") / "run"
    logger = "rllm.trainer.logger=[console,jsonl,tensorboard,mlflow]"
    assert main(["train", *RUN, f"rllm.trainer.output_dir={out}", logger]) == 0
    return out


@pytest.fixture(scope="module")
def logged(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [(r["kind"], r["step"]) for r in records] == [
        ("val", 0),
        ("train", 1),
        ("train", 2),
        ("val", 2),
        ("train", 3),
        ("val", 3),
    ]
    return series(records)


def test_tensorboards_reader_returns_the_metrics_the_config_and_the_curve(
    run_dir: Path, logged: dict[str, list[tuple[int, float]]]
) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0, "images": 0})
    events.Reload()
    assert sorted(events.Tags()["scalars"]) == sorted(logged)
    for key, expected in logged.items():
        read = [(event.step, event.value) for event in events.Scalars(key)]
        assert [step for step, _ in read] == [step for step, _ in expected], key
        # TensorBoard keeps scalars as 32-bit floats: each value is the jsonl value rounded to float32.
        assert [np.float32(value) for _, value in read] == [np.float32(value) for _, value in expected], key
    assert "val/digit_sum/pass@1" in logged  # names are kept as rllm logs them
    content = events.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    hparams = plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info.hparams
    assert hparams["rllm.trainer.total_batches"].number_value == 3
    assert hparams["rllm.trainer.logger"].string_value == '["console", "jsonl", "tensorboard", "mlflow"]'
    assert hparams["rllm.algorithm.adv_estimator"].string_value == "grpo"
    (image,) = events.Images("learning_curve")
    assert image.step == 3 and image.encoded_image_string == (run_dir / "learning_curve.png").read_bytes()


def test_mlflows_client_returns_the_metrics_the_params_and_the_curve(
    run_dir: Path, logged: dict[str, list[tuple[int, float]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    client = MlflowClient(tracking_uri=(run_dir / "mlruns").as_uri())
    experiment = client.get_experiment_by_name("trackers")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.run_name == "four" and run.info.status == "FINISHED"
    assert sorted(run.data.metrics) == sorted(mlflow_name(key) for key in logged)
    for key, expected in logged.items():
        history = client.get_metric_history(run.info.run_id, mlflow_name(key))
        assert sorted((m.step, m.value) for m in history) == sorted(expected), key  # float64: equal
    assert mlflow_name("val/digit_sum/pass@1") == "val/digit_sum/pass_at_1"
    assert run.data.params["rllm.trainer.total_batches"] == "3"
    assert run.data.params["rllm.trainer.output_dir"] == str(run_dir)
    assert [a.path for a in client.list_artifacts(run.info.run_id)] == ["learning_curve.png"]


def test_a_resumed_run_continues_the_same_mlflow_run(run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mlflow.tracking import MlflowClient

    more = [w.replace("total_batches=3", "total_batches=4") for w in RUN]
    assert main(["train", *more, f"rllm.trainer.output_dir={run_dir}", "rllm.trainer.logger=[jsonl,mlflow]"]) == 0
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    client = MlflowClient(tracking_uri=(run_dir / "mlruns").as_uri())
    (run,) = client.search_runs([client.get_experiment_by_name("trackers").experiment_id])
    steps = [m.step for m in client.get_metric_history(run.info.run_id, "reward/solver/mean")]
    assert steps == [1, 2, 3, 4]
    assert run.data.params["rllm.trainer.total_batches"] == "3"  # MLflow's params never change


def test_wandb_offline_writes_its_run_directory(tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = main(["train", *RUN, f"rllm.trainer.output_dir={out}", "rllm.trainer.logger=[jsonl,wandb]"])
    assert done == 0
    runs = list((out / "wandb").glob("offline-run-*"))
    assert len(runs) == 1, sorted(p.name for p in (out / "wandb").iterdir())
    logs = list(runs[0].glob("run-*.wandb"))
    assert len(logs) == 1, sorted(p.name for p in runs[0].iterdir())
    data = logs[0].read_bytes()  # wandb's transaction log: its records hold the names as written
    for key in (b"reward/solver/mean", b"val/digit_sum/pass@1", b"total_batches", b"learning_curve"):
        assert key in data, (key, len(data))
    media = sorted(str(p.relative_to(runs[0])) for p in runs[0].rglob("*.png"))
    assert any("learning_curve" in path for path in media), media
    # A second run into the directory resumes: wandb's own links in its folder are no reason to refuse it, and its
    # wandb run, which logs the earlier steps again, replaces the first.
    more = [w.replace("total_batches=3", "total_batches=4") for w in RUN]
    assert main(["train", *more, f"rllm.trainer.output_dir={out}", "rllm.trainer.logger=[jsonl,wandb]"]) == 0
    assert len(list((out / "wandb").glob("offline-run-*"))) == 1


def wandb_history(run: Path) -> list[tuple[int, dict[str, float]]]:
    """The history rows of a wandb offline run, read from its transaction log with wandb's own record schema.

    The log is LevelDB's log format behind a 7-byte ``:W&B`` header: 32 KiB blocks of chunks (checksum 4 bytes,
    length 2, type 1: full, first, middle, last), each record a ``wandb_internal_pb2.Record``.
    """
    from wandb.proto import wandb_internal_pb2

    (log,) = run.glob("run-*.wandb")
    data, block = log.read_bytes(), 32768
    assert data[:4] == b":W&B"
    position, pending, rows = 7, b"", []
    while position + 7 <= len(data):
        room = block - position % block
        if room < 7:  # a block's tail too short for a chunk header is padding
            position += room
            continue
        length, kind = int.from_bytes(data[position + 4 : position + 6], "little"), data[position + 6]
        chunk = data[position + 7 : position + 7 + length]
        position += 7 + length
        if kind == 0 and length == 0:
            continue
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):
            record = wandb_internal_pb2.Record.FromString(pending)
            if record.WhichOneof("record_type") == "history":
                items = {
                    item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item
                }
                step = int(items.pop("_step"))
                rows.append((step, {k: v for k, v in items.items() if not k.startswith("_")}))
    return rows


def test_a_resumed_run_gives_every_tracker_each_step_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run killed after logging steps 3 and 4 but before checkpointing step 4 (its newest checkpoint is step 2)
    resumes and trains on to step 5: each library's reader finds every step once, with metrics.jsonl's values."""
    from mlflow.tracking import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "run"
    logger = "rllm.trainer.logger=[jsonl,tensorboard,mlflow,wandb]"
    first = [w.replace("total_batches=3", "total_batches=4") for w in RUN]
    assert main(["train", *first, "rllm.trainer.save_freq=2", f"rllm.trainer.output_dir={out}", logger]) == 0
    before = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in before if r["kind"] == "train"] == [1, 2, 3, 4]
    shutil.rmtree(out / "checkpoints" / "step_4")  # what a SIGKILL between logging step 4 and its checkpoint leaves
    again = [w.replace("total_batches=3", "total_batches=5") for w in RUN]
    assert main(["train", *again, "rllm.trainer.save_freq=2", f"rllm.trainer.output_dir={out}", logger]) == 0
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [(r["kind"], r["step"]) for r in records] == [
        ("val", 0), ("train", 1), ("train", 2), ("val", 2), ("train", 3), ("train", 4), ("val", 4), ("train", 5),
        ("val", 5),
    ]  # fmt: skip
    assert records[4]["wall_time"] != before[4]["wall_time"]  # step 3 was trained and logged again
    logged = series(records)

    events = EventAccumulator(str(out / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    assert len(list((out / "tensorboard").glob("events.out.tfevents.*"))) == 2
    for key, expected in logged.items():
        read = [(event.step, np.float32(event.value)) for event in events.Scalars(key)]
        assert read == [(step, np.float32(value)) for step, value in expected], key

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    client = MlflowClient(tracking_uri=(out / "mlruns").as_uri())
    (run,) = client.search_runs([client.get_experiment_by_name("trackers").experiment_id])
    assert run.info.status == "FINISHED" and run.data.params["rllm.trainer.total_batches"] == "4"
    for key, expected in logged.items():
        history = client.get_metric_history(run.info.run_id, mlflow_name(key))
        assert sorted((m.step, m.value) for m in history) == sorted(expected), key

    # wandb's history has one row per step: the train and val records of a step are one row (the later wall_time)
    (offline,) = (out / "wandb").glob("offline-run-*")
    rows = wandb_history(offline)
    assert [step for step, _ in rows] == [0, 1, 2, 3, 4, 5]
    by_step: dict[int, dict[str, float]] = {}
    for record in records:
        numbers = {k: float(v) for k, v in record.items() if k not in ("kind", "step") and isinstance(v, int | float)}
        by_step.setdefault(record["step"], {}).update(numbers)
    image = ("learning_curve", "learning_curve/")  # the image: a wandb media entry and its sizes
    read = [
        (step, {k: float(v) for k, v in row.items() if isinstance(v, int | float) and not k.startswith(image)})
        for step, row in rows
    ]
    assert read == sorted(by_step.items())


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["rllm.trainer.logger=[jsonl,tensorbord]"],
            "got ['jsonl', 'tensorbord']. Did you mean 'tensorboard'?",
        ),
        (["rllm.trainer.logger=[jsonl,wandb]", "rllm.wandb.mode=offlne"], "rllm.wandb.mode must be one of offline"),
    ],
)
def test_bad_names_are_one_line_before_anything_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], overrides: list[str], message: str
) -> None:
    out = tmp_path / "run"
    assert main(["train", *RUN, f"rllm.trainer.output_dir={out}", *overrides]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0] and not out.exists()


def test_a_missing_library_is_one_line_naming_the_extra(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "tensorboardX", None)  # as if not installed: find_spec refuses it
    out = tmp_path / "run"
    assert main(["train", *RUN, f"rllm.trainer.output_dir={out}", "rllm.trainer.logger=[jsonl,tensorboard]"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "rllm train: error: rllm.trainer.logger names tracker 'tensorboard' (plugin 'trackers', distribution rllm "
        f"{__import__('rllm').__version__}), which needs the package 'tensorboardX': pip install 'rllm[tensorboard]'."
    )
    assert not out.exists()


def test_an_unwritable_tensorboard_folder_is_one_line_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("")
    overrides = ["rllm.trainer.logger=[jsonl,tensorboard]", f"rllm.tensorboard.log_dir={blocker / 'tb'}"]
    assert main(["train", *RUN, f"rllm.trainer.output_dir={tmp_path / 'run'}", *overrides]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(
        f"rllm train: error: Tracker 'tensorboard' cannot create its folder '{blocker / 'tb'}' "
        "(rllm.tensorboard.log_dir): "
    )
    assert err[-1].endswith("set rllm.tensorboard.log_dir to a writable folder.")
    assert "Traceback" not in "\n".join(err)
    assert (tmp_path / "run" / "metrics.jsonl").read_text() == ""  # opened by jsonl, which started first; no step


@parametrize_with_checks(plugin="trackers")
def test_the_trackers_plugin_passes_rllm_testing(check: Any) -> None:
    check()


def test_two_runs_started_within_one_second_keep_a_tensorboard_file_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tensorboardX names an event file by the second and the host: a run resumed within the second its predecessor
    started reopened that file and wrote over it. Each run keeps its own file, read back in the order they ran."""
    import tensorboardX.event_file_writer as event_file_writer
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from rllm.trainer import TrackerRun
    from rllm_trackers.tensorboard_tracker import TensorBoardTracker

    monkeypatch.setattr(event_file_writer.time, "time", lambda: 1_796_593_509.25)  # one second for both runs
    config = {"rllm": {"tensorboard": {"log_dir": str(tmp_path / "tensorboard")}}}
    run = TrackerRun("tensorboard", tmp_path, "project", "experiment", config)
    for step in (1, 2):
        tracker = TensorBoardTracker(run)
        tracker.start(total_steps=2)
        tracker.log_metrics({"loss": float(step)}, step, "train")
        tracker.close()
    assert len(list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))) == 2
    events = EventAccumulator(str(tmp_path / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    assert [(event.step, event.value) for event in events.Scalars("loss")] == [(1, 1.0), (2, 2.0)]
