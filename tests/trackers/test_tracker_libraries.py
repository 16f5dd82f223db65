"""The tensorboard, mlflow and wandb trackers write what each library's own reader gives back: metrics.jsonl.

One ``rllm train`` run with ``rllm.trainer.logger=[console,jsonl,tensorboard,mlflow]``; TensorBoard's event
reader and MLflow's client then return every step's metrics (TensorBoard's as the 32-bit floats it stores),
the config as hyper-parameters and the learning curve. wandb, offline, writes its run directory.
"""

from __future__ import annotations

import json
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
    # A second run into the directory resumes: wandb's own links in its folder are no reason to refuse it.
    more = [w.replace("total_batches=3", "total_batches=4") for w in RUN]
    assert main(["train", *more, f"rllm.trainer.output_dir={out}", "rllm.trainer.logger=[jsonl,wandb]"]) == 0
    assert len(list((out / "wandb").glob("offline-run-*"))) == 2


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
