"""The ``trackers`` plugin's registrations: the trackers by path (loading plugins imports none of their libraries)
and the config sections that set where each writes."""

from __future__ import annotations

import rllm
from rllm.config import ConfigKey
from rllm.plugins import ConfigSectionRegistrar, TrackerRegistrar

TRACKERS = {
    "tensorboard": "rllm_trackers.tensorboard_tracker:TensorBoardTracker",
    "mlflow": "rllm_trackers.mlflow_tracker:MlflowTracker",
    "wandb": "rllm_trackers.wandb_tracker:WandbTracker",
}
"""Each tracker's name in ``rllm.trainer.logger`` (verl's names) and its class."""

SECTIONS = {
    "rllm.tensorboard": [
        ConfigKey(
            "log_dir",
            "str",
            "${rllm.trainer.output_dir}/tensorboard",
            "tensorboard: folder of the event files (`tensorboard --logdir` it).",
        ),
    ],
    "rllm.mlflow": [
        ConfigKey(
            "tracking_uri",
            "str",
            None,
            "mlflow: tracking server or store URI; null: a local file store in {output_dir}/mlruns.",
            nullable=True,
        ),
    ],
    "rllm.wandb": [
        ConfigKey(
            "mode",
            "str",
            "offline",
            "wandb: offline (files only, `wandb sync` uploads them later), online, or disabled.",
            choices=("offline", "online", "disabled"),
        ),
        ConfigKey("dir", "str", "${rllm.trainer.output_dir}", "wandb: folder that receives wandb/ and its runs."),
    ],
}


@rllm.hookimpl
def rllm_register_trackers(register: TrackerRegistrar) -> None:
    for name, path in TRACKERS.items():
        register(name, path)


@rllm.hookimpl
def rllm_register_config_sections(register: ConfigSectionRegistrar) -> None:
    for section, keys in SECTIONS.items():
        register(section, keys)
