"""Slow runs of the transformers backend: learning, SIGKILL and resume, an installed estimator plugin."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from extras import skip_module_without

skip_module_without("torch", "transformers", "safetensors", install="pip install 'rllm[transformers]' (CI does)")

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "reliability"))
from test_trainer_runs import _comparable, _kill_repeatedly, _records, _steps, _train

pytestmark = pytest.mark.slow

TINY_RUN = ("rllm.backend=transformers", "rllm.transformers.device=cpu")


def _pass_at_1(run_dir: Path) -> list[float]:
    return [r["val/digit_max/pass@1"] for r in _records(run_dir, "val")]


LORA_RUN = ("rllm.transformers.lora.rank=8", "rllm.transformers.lora.alpha=16", "rllm.transformers.lr=0.01")


@pytest.mark.parametrize(
    ("extra", "final", "gain", "weights"),
    [((), 0.75, 0.3, "model.safetensors"), (LORA_RUN, 0.4, 0.05, "adapter_model.safetensors")],
    ids=["whole-model", "lora"],
)
def test_a_short_run_clearly_raises_validation_pass_at_1(
    tmp_path: Path, extra: tuple[str, ...], final: float, gain: float, weights: str
) -> None:
    """25 steps of the defaults (20 tasks x 8 rollouts): greedy pass@1 from chance to well above it. With rank-8
    LoRA adapters only (lr 0.01) less far: 0.0 -> 0.6 at seed 0; its checkpoints hold the adapter."""
    done = _train(
        tmp_path,
        *TINY_RUN,
        *extra,
        "rllm.data.train_batch_size=20",
        "rllm.rollout.n=8",
        "rllm.trainer.total_batches=25",
        "rllm.trainer.test_freq=25",
    )
    assert done.returncode == 0, done.stderr
    curve = _pass_at_1(tmp_path)
    assert curve[0] <= 0.3 and curve[-1] >= final, curve
    rewards = [r["reward/solver/mean"] for r in _records(tmp_path)]
    assert sum(rewards[-5:]) / 5 > sum(rewards[:5]) / 5 + gain
    assert (tmp_path / "checkpoints" / "step_25" / "model" / weights).is_file()


KILL_RUN = (*TINY_RUN, "rllm.trainer.total_batches=30", "rllm.trainer.save_freq=2", "rllm.trainer.test_freq=10")


def test_five_sigkills_then_resume_give_the_uninterrupted_metrics(tmp_path: Path) -> None:
    killed_dir, clean_dir = tmp_path / "killed", tmp_path / "clean"
    clean = _train(clean_dir, *KILL_RUN)
    assert clean.returncode == 0, clean.stderr
    reached = _kill_repeatedly(killed_dir, KILL_RUN, random.Random(21), 5, (1, 4))
    assert reached[-1] < 30
    resumed = _train(killed_dir, *KILL_RUN)
    assert resumed.returncode == 0, resumed.stderr
    assert _steps(killed_dir) == list(range(1, 31))

    def same(records: list[dict]) -> list[dict]:
        return [{k: v for k, v in r.items() if not k.startswith("perf/")} for r in _comparable(records)]

    assert same(_records(killed_dir)) == same(_records(clean_dir))
    assert same(_records(killed_dir, "val")) == same(_records(clean_dir, "val"))


def test_an_installed_estimator_plugin_trains_the_model_by_name(tmp_path: Path) -> None:
    """plugins/example pip-installed (a real distribution, its entry point discovered) into a target directory."""
    target = tmp_path / "site"
    install = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(target),
            str(REPO / "plugins" / "example"),
        ],
        capture_output=True,
        text=True,
    )
    assert install.returncode == 0, install.stderr
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), os.environ.get("PYTHONPATH", "")])}
    command = [
        sys.executable,
        "-m",
        "rllm.cli.main",
        "train",
        "--no-progress",
        *TINY_RUN,
        "rllm.algorithm.adv_estimator=median_baseline",
        "rllm.trainer.total_batches=2",
        "rllm.trainer.test_freq=0",
        "rllm.trainer.logger=[jsonl]",
        f"rllm.trainer.output_dir={tmp_path / 'run'}",
    ]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert _steps(tmp_path / "run") == [1, 2]
    assert all(r["advantage/solver/std"] >= 0 for r in _records(tmp_path / "run"))
