"""One run value: a per-role (estimator, loss) pair trains the same run through every door that takes it.

The trainer builds the run's ``AlgorithmConfig`` once and hands that object to the backend, so
the pair given as ``UnifiedTrainer(traj_group_adv_estimator_map=...)`` reaches the backend's
loss exactly as the same pair in the config does (a backend that rebuilt its settings from the
config alone trained the role with the default loss instead).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from rllm.cli.main import main
from rllm.trainer import AgentTrainer, UnifiedTrainer
from rllm.trainer.logging import METRICS_FILE, read_metrics

PAIR = ("rloo", "cispo")
# Two epochs over two mini-batches and a tight clip range: later updates are off-policy, where the
# default loss (ppo) and cispo differ, so a pair that lost its loss on the way shows in the metrics.
EMBEDDED = (
    "rllm.embedded.ppo_epochs=2",
    "rllm.embedded.mini_batches=2",
    "rllm.embedded.clip_ratio_low=0.01",
    "rllm.embedded.clip_ratio_high=0.01",
    "rllm.embedded.lr=2.0",
    "rllm.trainer.total_batches=2",
    "rllm.trainer.test_freq=0",
    "rllm.trainer.val_before_train=false",
    "rllm.trainer.logger=[jsonl]",
)
PAIR_OVERRIDE = f"rllm.algorithm.estimator_map.solver=[{PAIR[0]},{PAIR[1]}]"


def _numbers(path: Path) -> list[dict[str, Any]]:
    """The training records without wall-clock figures."""
    records = [r for r in read_metrics(path) if r["kind"] == "train"]
    return [{k: v for k, v in r.items() if k != "wall_time" and not k.startswith(("time/", "perf/"))} for r in records]


def _unified(config: Any, **kwargs: Any) -> UnifiedTrainer:
    trainer = UnifiedTrainer(None, config, progress=False, **kwargs)
    try:
        trainer.fit()
    finally:
        trainer.shutdown()
    return trainer


def _doors(tmp_path: Path) -> dict[str, Path]:
    """Train the embedded backend through each door; the metrics file of each."""
    from rllm.config import load_config

    out = {name: tmp_path / name for name in ("config", "keyword", "agent_mapping", "agent_overrides", "cli")}
    base = [*EMBEDDED]
    trainer = _unified(load_config(overrides=[*base, f"rllm.trainer.output_dir={out['config']}", PAIR_OVERRIDE]))
    assert trainer.backend.role_losses == {"solver": "cispo"}
    trainer = _unified(
        load_config(overrides=[*base, f"rllm.trainer.output_dir={out['keyword']}"]),
        traj_group_adv_estimator_map={"solver": PAIR},
    )
    assert trainer.backend.role_losses == {"solver": "cispo"}
    assert trainer.backend.algorithm is trainer.algorithm_config  # the one object, handed whole
    mapping = {key: yaml.safe_load(value) for key, value in (item.split("=", 1) for item in base)}
    AgentTrainer(
        config={
            **mapping,
            "rllm.trainer.output_dir": str(out["agent_mapping"]),
            "rllm.algorithm.estimator_map": {"solver": list(PAIR)},
        }
    ).train()
    AgentTrainer(config=[*base, f"rllm.trainer.output_dir={out['agent_overrides']}", PAIR_OVERRIDE]).train()
    assert main(["train", "--no-progress", *base, f"rllm.trainer.output_dir={out['cli']}", PAIR_OVERRIDE]) == 0
    return {name: path / METRICS_FILE for name, path in out.items()}


def test_a_role_pair_trains_the_same_run_through_every_door(tmp_path: Path) -> None:
    from rllm.config import load_config

    files = _doors(tmp_path)
    expected = _numbers(files["config"])
    assert len(expected) == 2
    for door, path in files.items():
        assert _numbers(path) == expected, door
    # and the pair's loss is in force: the default loss gives other numbers on the same seeds
    rloo = [*EMBEDDED, "rllm.algorithm.estimator_map.solver=rloo", f"rllm.trainer.output_dir={tmp_path / 'ppo'}"]
    default = _unified(load_config(overrides=rloo))
    assert default.backend.role_losses == {}
    assert _numbers(default.output_dir / METRICS_FILE) != expected


def test_backend_args_cannot_replace_the_run_value(tmp_path: Path) -> None:
    from rllm.config import load_config
    from rllm.errors import ConfigError

    config = load_config(overrides=[*EMBEDDED, f"rllm.trainer.output_dir={tmp_path / 'run'}"])
    with pytest.raises(ConfigError, match="backend_args may not hold 'config' or 'algorithm'"):
        UnifiedTrainer(None, config, backend_args={"algorithm": None}, progress=False)


def test_a_backend_that_drops_the_run_value_is_named(tmp_path: Path) -> None:
    from rllm.config import load_config
    from rllm.errors import TrainerError
    from rllm_builtin.embedded.backend import EmbeddedBackend

    class Forgetful(EmbeddedBackend):
        def __init__(self, config: Any, **kwargs: Any) -> None:
            super().__init__(config)  # the trainer's algorithm= is not passed on

    config = load_config(overrides=[*EMBEDDED, f"rllm.trainer.output_dir={tmp_path / 'run'}"])
    with pytest.raises(TrainerError, match=r"Backend Forgetful was built without the run's AlgorithmConfig"):
        UnifiedTrainer(Forgetful, config, progress=False)
