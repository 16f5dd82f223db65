"""The ``wandb`` tracker: a Weights & Biases run (``rllm[wandb]``), offline by default.

Offline, wandb writes its run under ``{rllm.wandb.dir}/wandb/`` and needs no network or account;
``wandb sync`` uploads it later, and ``rllm.wandb.mode=online`` streams instead. The wandb project is
``rllm.trainer.project_name``, the run name ``experiment_name``; the resolved config is the run's config
and the learning curve a logged image. wandb's own console capture is off, so rllm's output is unchanged. A
resumed run is a new wandb run that first logs the steps up to its checkpoint again (from metrics.jsonl).
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rllm.trainer import Tracker, TrackerRun, finite_metrics

MODE, DIR = "rllm.wandb.mode", "rllm.wandb.dir"


class WandbTracker(Tracker):
    """Metrics, config and the learning curve of one wandb run."""

    needs = ("wandb",)
    install = "rllm[wandb]"

    def __init__(self, run: TrackerRun) -> None:
        super().__init__(run)
        self.dir = Path(str(run.setting(DIR)))
        self.mode = str(run.setting(MODE))
        self.wandb_run: Any = None

    def outputs(self) -> list[Path]:
        return [self.dir / "wandb"]

    def start(self, total_steps: int) -> None:
        import wandb

        folder = self.run.folder(DIR)
        settings = wandb.Settings(console="off", silent=True)
        self.wandb_run = wandb.init(
            project=self.run.project,
            name=self.run.experiment,
            dir=str(folder),
            mode=self.mode,
            settings=settings,
            reinit="create_new",
        )

    def rewind(self, step: int, kept: Sequence[Mapping[str, Any]]) -> None:
        """wandb cannot take logged steps back (and offline, cannot resume a run), so the resumed run's wandb run
        starts over: the steps up to ``step`` logged again from ``kept``, then, offline, the earlier offline runs
        of this folder deleted, so it holds one run with each step once. Without ``kept`` (no jsonl tracker) they
        stay."""
        if not kept:
            return
        for record in kept:
            metrics = {key: value for key, value in record.items() if key not in ("kind", "step")}
            self.log_metrics(metrics, int(record["step"]), str(record.get("kind", "train")))
        if self.mode != "offline":
            return
        mine = Path(self.wandb_run.dir).parent  # {dir}/wandb/offline-run-{time}-{id}/files
        for earlier in mine.parent.glob("offline-run-*"):
            if earlier != mine and earlier.is_dir():
                shutil.rmtree(earlier)

    def log_config(self, config: Mapping[str, Any]) -> None:
        self.wandb_run.config.update(dict(config), allow_val_change=True)

    def log_metrics(self, metrics: Mapping[str, Any], step: int, kind: str) -> None:
        self.wandb_run.log(finite_metrics(metrics), step=step)

    def log_image(self, name: str, path: Path, step: int) -> None:
        import wandb

        self.wandb_run.log({name: wandb.Image(str(path))}, step=step)

    def close(self) -> None:
        """Finish the run; offline, also stop wandb's service process, which is what writes the run's transaction
        log out (after ``finish()`` alone wandb 0.31 sometimes leaves it a bare header; the next run restarts it)."""
        if self.wandb_run is not None:
            self.wandb_run.finish()
            self.wandb_run = None
            if self.mode == "offline":
                import wandb

                wandb.teardown()
