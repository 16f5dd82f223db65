"""Dynamic sampling on the reward spread: the filter, both strategies, the trainer's metrics and the plot."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from rllm.errors import ConfigError, RewardError
from rllm.trainer.dynamic_sampling import (
    DynamicSamplingConfig,
    SamplingState,
    informative,
    refill_tasks,
    reward_spread,
    substitute,
)
from rllm.trainer.grouping import group_by_task_and_role
from rllm.trainer.logging import METRICS_FILE, read_metrics
from rllm.trainer.unified import UnifiedTrainer
from rllm.types import Trajectory, TrajectoryGroup


def _group(task: str, rewards: list[float | None]) -> TrajectoryGroup:
    return TrajectoryGroup.for_task(task, "solver", [Trajectory(name="solver", reward=r) for r in rewards])


@pytest.mark.parametrize("reward, size", [(0.1, 7), (0.7, 3), (0.2, 6), (0.1, 3)])
def test_equal_rewards_have_no_spread_even_where_their_mean_is_not_the_reward(reward: float, size: int) -> None:
    # sum([0.1] * 7) / 7 is 0.09999999999999999: a deviation-based spread of these equal rewards is about 1e-17
    group = _group("a", [reward] * size)
    assert reward_spread(group, "std") == 0.0
    assert reward_spread(group, "range") == 0.0
    assert informative([group], DynamicSamplingConfig(enabled=True)) == [False]  # tolerance 0: "all rewards equal"


def test_spread_and_tolerance_work_for_non_binary_rewards() -> None:
    group = _group("a", [0.2, 0.4, 0.6, 0.8])
    # population std: mean 0.5, squared deviations 0.09 0.01 0.01 0.09 -> sqrt(0.05)
    assert reward_spread(group, "std") == pytest.approx(0.05**0.5)
    assert reward_spread(group, "range") == pytest.approx(0.6)
    assert reward_spread(_group("b", [0.7, float("nan"), None]), "std") == 0.0  # one finite reward: no spread
    groups = [group, _group("c", [0.5, 0.5, 0.5]), _group("d", [0.5, 0.55, 0.5])]
    assert informative(groups, DynamicSamplingConfig(enabled=True)) == [True, False, True]  # tolerance 0: any spread
    by_range = DynamicSamplingConfig(enabled=True, spread="range", tolerance=0.1)
    assert informative(groups, by_range) == [True, False, False]  # 0.05 <= 0.1
    by_std = DynamicSamplingConfig(enabled=True, spread="std", tolerance=0.22)
    assert informative(groups, by_std) == [True, False, False]  # sqrt(0.05) = 0.2236 > 0.22


def test_replace_copies_non_uniform_groups_of_the_same_batch() -> None:
    groups = [_group("a", [1, 0]), _group("b", [1, 1]), _group("c", [0, 1]), _group("d", [0, 0])]
    out, copied = substitute(groups, [True, False, True, False], step=5)
    assert copied == 2 and len(out) == 4
    assert [g.group_id for g in out[:2]] == ["a:solver", "c:solver"]
    picks = np.random.default_rng([104729, 5]).integers(2, size=2).tolist()
    assert [g.group_id for g in out[2:]] == [f"{['a', 'c'][p]}:solver#copy{n}" for n, p in enumerate(picks, 1)]
    sources = {id(t) for g in out[:2] for t in g.trajectories}
    assert not sources & {id(t) for g in out[2:] for t in g.trajectories}  # copies are new objects
    assert substitute(groups[1:2], [False], step=5) == ([groups[1]], 0)  # nothing to copy from


def test_refill_order_skips_tasks_already_in_the_step_and_continues_across_passes() -> None:
    tasks = [{"uid": f"t{i}"} for i in range(5)]
    state = SamplingState()
    order = np.random.default_rng([7919, 0]).permutation(5).tolist()
    exclude = {f"t{order[0]}"}
    first = refill_tasks(tasks, 2, exclude, state, lambda task, _: task["uid"])
    assert [t["uid"] for t in first] == [f"t{order[1]}", f"t{order[2]}"]
    assert (state.cycle, state.cursor) == (0, 3) and len(exclude) == 3
    rest = refill_tasks(tasks, 5, set(), state, lambda task, _: task["uid"])
    # five looks at most: the end of the first pass, then the start of a second, reshuffled one;
    # a task seen twice in one step is skipped the second time
    looked = order[3:] + np.random.default_rng([7919, 1]).permutation(5).tolist()[:3]
    assert [t["uid"] for t in rest] == [f"t{i}" for i in dict.fromkeys(looked)]
    assert (state.cycle, state.cursor) == (1, 3)


def _section(**values: object) -> dict:
    config = {
        "dynamic_sampling": {"enable": False, "strategy": "drop", "spread": "std", "tolerance": 0.0, "max_rounds": 3},
        "rejection_sample": {"enable": False, "filter_uniform_groups": False},
    }
    for key, value in values.items():
        section, name = key.split("__")
        config[section][name] = value
    return OmegaConf.create(config)


def test_filter_uniform_groups_is_dynamic_sampling_with_tolerance_zero_and_drop() -> None:
    config = DynamicSamplingConfig.from_config(_section(rejection_sample__filter_uniform_groups=True))
    assert (config.enabled, config.strategy, config.tolerance) == (True, "drop", 0.0)
    with pytest.raises(ConfigError, match=r"filter_uniform_groups=true means .* drop strategy"):
        DynamicSamplingConfig.from_config(
            _section(
                rejection_sample__filter_uniform_groups=True,
                dynamic_sampling__enable=True,
                dynamic_sampling__strategy="replace",
            )
        )
    with pytest.raises(ConfigError, match=r"rllm.rejection_sample.enable .* enable one of them"):
        DynamicSamplingConfig.from_config(_section(rejection_sample__enable=True, dynamic_sampling__enable=True))


def test_replace_in_the_trainer_fills_every_batch_that_has_signal(make_config) -> None:
    config = make_config(
        "rllm.dynamic_sampling.enable=true",
        "rllm.dynamic_sampling.strategy=replace",
        "rllm.data.train_batch_size=8",
        "rllm.rollout.n=4",
        "rllm.trainer.total_batches=12",
        "rllm.trainer.test_freq=0",
    )
    trainer = UnifiedTrainer(None, config, progress=False)
    try:
        trainer.fit()
    finally:
        trainer.shutdown()
    records = [r for r in read_metrics(trainer.output_dir / METRICS_FILE) if r["kind"] == "train"]
    with_signal = [r for r in records if r["sampling/groups_uniform"] < r["sampling/target_groups"]]
    assert len(with_signal) >= 6
    for r in with_signal:  # every uniform group became a copy: the update sees a full batch of signal
        assert r["sampling/effective_groups"] == r["sampling/target_groups"]
        assert r["sampling/groups_replaced"] == r["sampling/groups_uniform"]
        assert r["sampling/rounds"] == 1  # no extra generation
    assert sum(r["sampling/groups_replaced"] for r in with_signal) > 0


@pytest.mark.parametrize("sampling", ["rllm.dynamic_sampling.enable=true", "rllm.rejection_sample.enable=true"])
def test_a_nan_reward_is_an_error_before_any_filter_drops_its_group(make_config, sampling: str) -> None:
    # [NaN, 1, 1, 1] looks uniform to dynamic sampling, and rejection sampling drops a group solved by all
    def planted(episodes):  # type: ignore[no-untyped-def]
        groups = group_by_task_and_role(episodes)
        for position, trajectory in enumerate(groups[0].trajectories):
            trajectory.reward = math.nan if position == 0 else 1.0
        return groups

    config = make_config(
        sampling,
        "rllm.rejection_sample.mode=batch",
        "rllm.rollout.n=4",
        "rllm.trainer.total_batches=1",
        "rllm.trainer.test_freq=0",
        "rllm.trainer.val_before_train=false",
    )
    trainer = UnifiedTrainer(None, config, traj_grouping_hook=planted, progress=False)
    try:
        with pytest.raises(RewardError, match=r"1 reward\(s\) are missing, NaN or infinite.*group"):
            trainer.fit()
    finally:
        trainer.shutdown()


DEMO = [
    "rllm.trainer.logger=[jsonl]",
    "rllm.data.train_batch_size=8",
    "rllm.rollout.n=8",
    "rllm.embedded.lr=2.0",
    "rllm.trainer.total_batches=40",
    "rllm.trainer.test_freq=10",
]


def _rllm_train(*args: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "rllm.cli.main", "train", "--no-progress", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={"MPLBACKEND": "Agg", "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr


def test_drop_keeps_the_effective_batch_full_while_plain_grpo_shrinks(tmp_path: Path) -> None:
    plain, drop = tmp_path / "plain", tmp_path / "drop"
    _rllm_train(*DEMO, f"rllm.trainer.output_dir={plain}")
    _rllm_train(
        *DEMO,
        f"rllm.trainer.output_dir={drop}",
        "rllm.dynamic_sampling.enable=true",
        "rllm.dynamic_sampling.max_rounds=8",
    )
    curve = tmp_path / "effective_batch.png"
    _rllm_train("--plot", str(plain), str(drop), "--output", str(curve))
    assert curve.stat().st_size > 10_000

    def train(run: Path) -> list[dict]:
        return [r for r in read_metrics(run / METRICS_FILE) if r["kind"] == "train"]

    def share(records: list[dict]) -> float:
        """The effective batch as a share of the target, over ``records``."""
        return sum(r["sampling/effective_groups"] for r in records) / sum(r["sampling/target_groups"] for r in records)

    plain_records, drop_records = train(plain), train(drop)
    # plain GRPO: groups are informative while the policy is half right, uniform again as it masters tasks
    middle = [r for r in plain_records if 0.25 <= r["batch/accuracy"] < 0.75]
    good = [r for r in plain_records if r["batch/accuracy"] >= 0.75]
    assert len(middle) >= 10 and len(good) >= 4
    # measured 0.38 and 0.39 of the target (rllm.workflow.seed 1 and 2: 0.14/0.37, 0.23/0.36)
    assert share(good) < share(middle) < 0.6
    # drop: the first 20 steps (validation pass@1 rising) keep the batch (nearly) full
    first = drop_records[:20]
    assert share(first) > 0.9 > 0.5 > share(plain_records[:20])  # measured: 0.94 and 0.43
    assert sum(r["sampling/effective_groups"] == r["sampling/target_groups"] for r in first) >= 12  # measured: 13
    assert all(r["sampling/rounds"] >= 1 for r in drop_records) and max(r["sampling/rounds"] for r in first) > 1
    assert sum(r["sampling/groups_uniform"] for r in first) > 0
    assert "sampling/rounds" not in plain_records[0]
