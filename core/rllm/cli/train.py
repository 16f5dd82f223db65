"""``rllm train``: run the RL loop, or plot finished runs."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from rllm.cli.args import add_config_arguments, command_parser, split_words
from rllm.config.algorithm import estimator_name


def add_parser(sub: Any) -> None:
    parser = command_parser(
        sub,
        "train",
        "train with the configured backend (default: embedded CPU backend), or plot runs",
        "Train with the unified trainer on the configured backend. The run directory\n"
        "(rllm.trainer.output_dir) receives config.yaml, metrics.jsonl, checkpoints and the\n"
        "learning curve; running the same command again (or `rllm train -c RUN_DIR/config.yaml`)\n"
        "resumes from the last checkpoint, and a finished run says so and does nothing: add\n"
        "rllm.trainer.resume_mode=disable to run it again from step 0.",
        [
            "rllm train rllm.trainer.total_batches=20",
            "rllm train my_run.yaml rllm.algorithm.adv_estimator=rloo rllm.trainer.experiment_name=rloo",
            "rllm train --plot runs/rllm/default runs/rllm/rloo --output curves.png",
        ],
    )
    add_config_arguments(parser)
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    parser.add_argument(
        "--plot",
        nargs="+",
        metavar="RUN_DIR",
        help="do not train: plot the learning curves of these run directories into --output",
    )
    parser.add_argument("--output", type=Path, help="PNG path for --plot (default: learning_curves.png)")
    parser.set_defaults(run=run)


def _plot(run_dirs: list[Path], output: Path) -> int:
    from rllm.trainer.plot import plot_runs

    path = plot_runs(run_dirs, output)
    print(f"learning curves written to {path}")
    return 0


def _opening_line(trainer: Any) -> str:
    """What is trained: backend, estimator(s), loss and its options, steps and run directory."""
    from rllm.trainer.backend_protocol import TrainerState
    from rllm.trainer.rejection import RejectionSamplingState

    algorithm = trainer.algorithm_config
    estimators = estimator_name(algorithm.estimator)
    if algorithm.estimator_map:
        roles = ", ".join(f"{role}: {estimator_name(name)}" for role, name in sorted(algorithm.estimator_map.items()))
        estimators += f" ({roles})"
    steps = trainer._total_steps(TrainerState(rs_state=RejectionSamplingState()))
    loss = getattr(trainer.backend, "loss_description", None) or algorithm.loss_fn or "the backend's default"
    return (
        f"rllm train: backend {trainer.rllm_config.backend}, estimator {estimators}, loss {loss}, {steps} steps, "
        f"run directory {trainer.output_dir}"
    )


def run(args: argparse.Namespace) -> int:
    words = split_words(args)
    if args.plot:
        from rllm.trainer.plot import DEFAULT_NAME

        return _plot([Path(p) for p in args.plot], args.output or Path(DEFAULT_NAME))
    from rllm.trainer.agent_flow import flow_objects, flow_trainer
    from rllm.trainer.unified import UnifiedTrainer

    config = words.load()
    started = time.perf_counter()
    named = flow_objects(config)
    stop = None
    if named is None:
        trainer = UnifiedTrainer(None, config, progress=not args.no_progress, learning_curve=True)
    else:
        trainer, stop = flow_trainer(None, config, *named, progress=not args.no_progress, learning_curve=True)
    writes = trainer.writes  # in a data-parallel run rank 0 alone speaks and plots
    try:
        if writes:
            print(_opening_line(trainer), flush=True)
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
        if stop is not None:
            stop()
    if not writes:
        return 0
    print(f"rllm train: done in {time.perf_counter() - started:.1f}s; metrics and checkpoints in {trainer.output_dir}")
    if trainer.learning_curve is not None:
        print(f"learning curves written to {trainer.learning_curve}")
    return 0
