"""The ``mlflow`` tracker: an MLflow run (``rllm[mlflow]``, the mlflow-skinny client).

By default the store is a local file store in ``{output_dir}/mlruns``: nothing to serve, and a run that
starts over deletes it with the rest of the run directory. MLflow 3 keeps that store in maintenance
mode behind ``MLFLOW_ALLOW_FILE_STORE``, which this tracker sets for its own store only when unset.
The MLflow experiment is ``rllm.trainer.project_name``, the run ``experiment_name``; a resumed run
continues the MLflow run it started in that local store (replaced by a copy up to the checkpoint's step when a
killed run logged later steps: MLflow cannot delete a logged value). MLflow allows letters, digits and ``_-. :/`` in
names, so ``@`` becomes ``_at_`` (``val/digit_sum/pass_at_1``) and any other character ``_``.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rllm.trainer import Tracker, TrackerRun, finite_metrics, flatten_config

TRACKING_URI = "rllm.mlflow.tracking_uri"
STORE = "mlruns"
BATCH = 1000
"""MLflow's limit of metrics in one ``log_batch`` call (params: 100)."""
_PARAMS_BATCH = 100
_NOT_ALLOWED = re.compile(r"[^\w\-. :/]")


def mlflow_name(key: str) -> str:
    """``key`` as MLflow accepts a metric or parameter name: ``@`` is ``_at_``, other characters it refuses ``_``."""
    return _NOT_ALLOWED.sub("_", key.replace("@", "_at_"))


class MlflowTracker(Tracker):
    """Metrics, the resolved config as params and the learning curve as an artifact of one MLflow run."""

    needs = ("mlflow",)
    install = "rllm[mlflow]"

    def __init__(self, run: TrackerRun) -> None:
        super().__init__(run)
        uri = run.setting(TRACKING_URI)
        self.local = uri is None
        self.store = run.output_dir / STORE
        self.uri = self.store.absolute().as_uri() if uri is None else str(uri)
        self.client: Any = None
        self.run_id: str | None = None

    def outputs(self) -> list[Path]:
        return [self.store] if self.local else []

    def start(self, total_steps: int) -> None:
        if self.local:
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri=self.uri)
        experiment = self.client.get_experiment_by_name(self.run.project)
        experiment_id = (
            experiment.experiment_id if experiment is not None else self.client.create_experiment(self.run.project)
        )
        earlier = self.client.search_runs(
            [experiment_id], filter_string=f"tags.mlflow.runName = '{self.run.experiment}'", max_results=1
        )
        if self.local and earlier:  # the local store is this run directory's: its run is this run's
            self.run_id = earlier[0].info.run_id
            self.client.update_run(self.run_id, status="RUNNING")
        else:
            self.run_id = self.client.create_run(experiment_id, run_name=self.run.experiment).info.run_id

    def rewind(self, step: int, kept: Sequence[Mapping[str, Any]]) -> None:
        """When the continued run holds values of steps after ``step`` (MLflow keeps every value logged at a step, and
        has no call deleting one), it is replaced: a new run with its params and the values up to ``step``, the old
        one deleted (MLflow's searches no longer list it)."""
        if not self.local:  # a remote store's runs are not this directory's: this attempt has a run of its own
            return
        from mlflow.entities import Metric, Param

        old = self.client.get_run(self.run_id)
        history = {key: self.client.get_metric_history(self.run_id, key) for key in old.data.metrics}
        if not any(m.step > step for values in history.values() for m in values):
            return
        new = self.client.create_run(old.info.experiment_id, run_name=self.run.experiment).info.run_id
        params = [Param(key, value) for key, value in old.data.params.items()]
        for start in range(0, len(params), _PARAMS_BATCH):
            self.client.log_batch(new, params=params[start : start + _PARAMS_BATCH])
        metrics = [Metric(k, m.value, m.timestamp, m.step) for k, v in history.items() for m in v if m.step <= step]
        for start in range(0, len(metrics), BATCH):
            self.client.log_batch(new, metrics=metrics[start : start + BATCH])
        self.client.delete_run(self.run_id)
        self.run_id = new

    def log_config(self, config: Mapping[str, Any]) -> None:
        from mlflow.entities import Param

        have = self.client.get_run(self.run_id).data.params
        params = [
            Param(mlflow_name(key), value if isinstance(value, str) else json.dumps(value))
            for key, value in flatten_config(config).items()
            if mlflow_name(key) not in have  # a resumed run keeps the params it started with (MLflow's rule)
        ]
        for start in range(0, len(params), _PARAMS_BATCH):
            self.client.log_batch(self.run_id, params=params[start : start + _PARAMS_BATCH])

    def log_metrics(self, metrics: Mapping[str, Any], step: int, kind: str) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [Metric(mlflow_name(k), v, now, step) for k, v in finite_metrics(metrics).items()]
        for start in range(0, len(batch), BATCH):
            self.client.log_batch(self.run_id, metrics=batch[start : start + BATCH])

    def log_image(self, name: str, path: Path, step: int) -> None:
        self.client.log_artifact(self.run_id, str(path))

    def close(self) -> None:
        if self.client is not None and self.run_id is not None:
            self.client.set_terminated(self.run_id)
        self.client = self.run_id = None
