"""The ``wandb`` tracker: a Weights & Biases run (``rllm[wandb]``), offline by default.

Offline, wandb writes its run under ``{rllm.wandb.dir}/wandb/`` and needs no network or account;
``wandb sync`` uploads it later, and ``rllm.wandb.mode=online`` streams instead. The wandb project is
``rllm.trainer.project_name``, the run name ``experiment_name``; the resolved config is the run's config
and the learning curve a logged image. wandb's own console capture is off, so rllm's output is unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
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

    def log_config(self, config: Mapping[str, Any]) -> None:
        self.wandb_run.config.update(dict(config), allow_val_change=True)

    def log_metrics(self, metrics: Mapping[str, Any], step: int, kind: str) -> None:
        self.wandb_run.log(finite_metrics(metrics), step=step)

    def log_image(self, name: str, path: Path, step: int) -> None:
        import wandb

        self.wandb_run.log({name: wandb.Image(str(path))}, step=step)

    def close(self) -> None:
        if self.wandb_run is not None:
            self.wandb_run.finish()
            self.wandb_run = None
