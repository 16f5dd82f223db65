"""Learning curves from ``metrics.jsonl`` files, one line per run, for comparing estimators.

matplotlib is an optional extra (``pip install 'rllm[plot]'``), imported only here.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from rllm.errors import RLLMError
from rllm.io import open_output
from rllm.trainer.logging import METRICS_FILE, read_metrics
from rllm.trainer.run_files import LEARNING_CURVE
from rllm.trainer.trackers import Trackers

DEFAULT_NAME = "learning_curves.png"
"""File name of the figure when the output is a folder (or not given, in ``rllm train --plot``)."""


class PlotUnavailableError(RLLMError):
    """matplotlib is not installed."""


def _series(
    records: list[dict], kind: str, predicate: Callable[[str], bool]
) -> dict[str, tuple[list[int], list[float]]]:
    out: dict[str, tuple[list[int], list[float]]] = {}
    for record in records:
        if record.get("kind") != kind:
            continue
        for key, value in record.items():
            if predicate(key) and isinstance(value, int | float):
                steps, values = out.setdefault(key, ([], []))
                steps.append(int(record["step"]))
                values.append(float(value))
    return out


EFFECTIVE_BATCH = "sampling/effective_groups"
"""Training metric of the third panel: groups whose rewards vary, as they reach the update."""


def plot_runs(run_dirs: Sequence[Path], output: Path, labels: Sequence[str] | None = None) -> Path:
    """Plot validation pass@1 per data source, the mean training reward and the effective batch of every run."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise PlotUnavailableError(
            "Plotting needs matplotlib: pip install 'rllm[plot]' (metrics stay in metrics.jsonl)."
        ) from exc
    labels = list(labels) if labels else [Path(d).name for d in run_dirs]
    fig, (ax_val, ax_reward, ax_batch) = plt.subplots(1, 3, figsize=(15, 4))
    for run_dir, label in zip(run_dirs, labels, strict=True):
        records = read_metrics(Path(run_dir) / METRICS_FILE)
        if not records:
            raise RLLMError(f"{str(Path(run_dir) / METRICS_FILE)!r} has no metrics; is this a run directory?")
        for steps, values in _series(records, "train", lambda k: k == EFFECTIVE_BATCH).values():
            ax_batch.plot(steps, values, label=label)
        for key, (steps, values) in _series(records, "val", lambda k: k.endswith("/pass@1")).items():
            source = key.split("/")[1]
            ax_val.plot(steps, values, marker="o", ms=3, label=f"{label} {source}")
        rewards = _series(records, "train", lambda k: k.startswith("reward/") and k.endswith("/mean"))
        for key, (steps, values) in rewards.items():
            ax_reward.plot(steps, values, label=f"{label} {key.split('/')[1]}")
    ax_val.set(title="validation pass@1", xlabel="step", ylim=(0, 1.02))
    ax_reward.set(title="training reward (mean)", xlabel="step")
    ax_batch.set(title="effective batch (groups whose rewards vary)", xlabel="step", ylim=(0, None))
    for axis in (ax_val, ax_reward, ax_batch):
        axis.grid(alpha=0.3)
        if axis.get_legend_handles_labels()[0]:  # a run without validation has no val curve
            axis.legend(fontsize=8)
    fig.tight_layout()
    if output.is_dir():  # `--output DIR`: the figure goes inside the folder
        output = output / DEFAULT_NAME
    image = io.BytesIO()
    fig.savefig(image, dpi=110, format="png")
    plt.close(fig)
    with open_output(output) as out:  # a read-only folder is one OutputFileError naming the path
        out.write(image.getvalue())
    return output


def draw_learning_curve(output_dir: Path, logger: Trackers, step: int) -> Path | None:
    """``learning_curve.png`` of a run from its ``metrics.jsonl`` (when the jsonl tracker wrote one), handed to every
    tracker; None when there is nothing to draw or matplotlib is missing (said on stderr)."""
    if not read_metrics(output_dir / METRICS_FILE):
        return None
    try:
        curve = plot_runs([output_dir], output_dir / LEARNING_CURVE)
    except PlotUnavailableError as exc:
        print(f"rllm: no learning curve: {exc}", file=sys.stderr)
        return None
    logger.log_image("learning_curve", curve, step)
    return curve
