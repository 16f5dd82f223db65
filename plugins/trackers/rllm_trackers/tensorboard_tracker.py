"""The ``tensorboard`` tracker: TensorBoard event files written with tensorboardX (``rllm[tensorboard]``).

tensorboardX is the lightest writer of the format (numpy and protobuf; TensorBoard itself is needed
only to view the files). Metric names are kept as rllm logs them (``val/digit_sum/pass@1``): each record
is one ``Summary`` of scalars, which TensorBoard stores as 32-bit floats. The resolved config goes to
TensorBoard's hyper-parameters tab, the learning curve to its images tab. A resumed run writes a new event
file opening with TensorBoard's restart marker, so the reader shows each step once.
"""

from __future__ import annotations

import json
import struct
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rllm.trainer import Tracker, TrackerRun, finite_metrics, flatten_config

LOG_DIR = "rllm.tensorboard.log_dir"
_RGBA = 4
"""The PNG's colour space as TensorBoard's image summary names it (the curve is RGBA)."""


def _hparam(value: Any) -> bool | int | float | str:
    """A config value as TensorBoard's hyper-parameters accept it: a number, a bool, or else its JSON text."""
    if isinstance(value, bool | int | float | str):
        return value
    return json.dumps(value)


class TensorBoardTracker(Tracker):
    """Scalars, hyper-parameters and the learning curve in ``rllm.tensorboard.log_dir``."""

    needs = ("tensorboardX",)
    install = "rllm[tensorboard]"

    def __init__(self, run: TrackerRun) -> None:
        super().__init__(run)
        self.log_dir = Path(str(run.setting(LOG_DIR)))
        self.writer: Any = None

    def outputs(self) -> list[Path]:
        return [self.log_dir]

    def start(self, total_steps: int) -> None:
        from tensorboardX import FileWriter

        # tensorboardX names a file by the second and the host: a run resumed within the same second would reopen
        # its predecessor's file and write over it. The nanoseconds keep each run's file apart, in the order they ran
        # (TensorBoard reads a directory's files in name order, which the restart marker relies on).
        self.writer = FileWriter(str(self.run.folder(LOG_DIR)), flush_secs=10, filename_suffix=f".{time.time_ns()}")

    def rewind(self, step: int, kept: Sequence[Mapping[str, Any]]) -> None:
        """TensorBoard's restart marker (tensorboardX's ``purge_step``): its reader drops the events of the earlier
        files from ``step + 1`` on, those a killed run wrote after the checkpoint."""
        from tensorboardX.proto.event_pb2 import Event, SessionLog

        self.writer.add_event(Event(step=step + 1, session_log=SessionLog(status=SessionLog.START)))

    def log_config(self, config: Mapping[str, Any]) -> None:
        from tensorboardX.summary import hparams

        flat = {key: _hparam(value) for key, value in flatten_config(config).items()}
        for summary in hparams(flat, {}):
            self.writer.add_summary(summary)

    def log_metrics(self, metrics: Mapping[str, Any], step: int, kind: str) -> None:
        from tensorboardX.proto.summary_pb2 import Summary

        values = [Summary.Value(tag=key, simple_value=value) for key, value in finite_metrics(metrics).items()]
        self.writer.add_summary(Summary(value=values), step)

    def log_image(self, name: str, path: Path, step: int) -> None:
        from tensorboardX.proto.summary_pb2 import Summary

        png = path.read_bytes()
        width, height = struct.unpack(">II", png[16:24])  # the PNG header's IHDR chunk (no Pillow in the extra)
        image = Summary.Image(height=height, width=width, colorspace=_RGBA, encoded_image_string=png)
        self.writer.add_summary(Summary(value=[Summary.Value(tag=name, image=image)]), step)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
