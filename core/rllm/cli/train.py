"""``rllm train [config.yaml] [key=value ...]``: run the RL loop, or plot finished runs.

Overrides are OmegaConf dot-lists as Hydra users write them, e.g.
``rllm train rllm.algorithm.adv_estimator=rloo rllm.trainer.experiment_name=rloo``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from rllm.config.loading import load_config
from rllm.errors import ConfigError


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "train",
        help="train with the configured backend (default: embedded CPU backend), or plot runs",
        description="Train with UnifiedTrainer. Arguments are an optional YAML config, then key=value overrides.",
    )
    parser.add_argument("args", nargs="*", metavar="[config.yaml] [key=value ...]")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    parser.add_argument(
        "--plot",
        nargs="+",
        metavar="RUN_DIR",
        help="do not train: plot the learning curves of these run directories into --output",
    )
    parser.add_argument("--output", type=Path, help="PNG path for --plot (default: learning_curves.png)")
    parser.set_defaults(run=run)


def _split(args: list[str]) -> tuple[list[str], list[str]]:
    files = [a for a in args if "=" not in a]
    overrides = [a for a in args if "=" in a]
    if len(files) > 1:
        raise ConfigError(f"rllm train takes at most one config file, got {files}; overrides are key=value.")
    return files, overrides


def _plot(run_dirs: list[Path], output: Path) -> int:
    from rllm.trainer.plot import plot_runs

    path = plot_runs(run_dirs, output)
    print(f"learning curves written to {path}")
    return 0


def run(args: argparse.Namespace) -> int:
    if args.plot:
        return _plot([Path(p) for p in args.plot], args.output or Path("learning_curves.png"))
    from rllm.trainer.plot import PlotUnavailableError
    from rllm.trainer.unified import UnifiedTrainer

    files, overrides = _split(list(args.args))
    config = load_config(*files, overrides=overrides)
    started = time.perf_counter()
    trainer = UnifiedTrainer(None, config, progress=not args.no_progress)
    try:
        trainer.fit()
    except KeyboardInterrupt:
        print(
            f"rllm train: interrupted; run the same command again to resume from the last checkpoint in "
            f"{trainer.output_dir / 'checkpoints'}.",
            file=sys.stderr,
        )
        return 130
    finally:
        trainer.shutdown()
    print(f"rllm train: done in {time.perf_counter() - started:.1f}s; metrics and checkpoints in {trainer.output_dir}")
    try:
        _plot([trainer.output_dir], trainer.output_dir / "learning_curve.png")
    except PlotUnavailableError as exc:
        print(f"rllm train: no learning curve: {exc}", file=sys.stderr)
    return 0
