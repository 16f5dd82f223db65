"""The collection step fills estimator inputs from trajectories, writes per-step results, runs compositions."""

from __future__ import annotations

import pytest

from rllm import AlgorithmConfig, Step, Trajectory, TrajectoryGroup
from rllm.errors import MissingInputError
from rllm.estimators.batch import AdvantageBatch
from rllm.estimators.collect import collect_reward_and_advantage_from_trajectory_groups as collect


def make_group(task: str, rewards: list[float], **info: list[object]) -> TrajectoryGroup:
    trajectories = []
    for position, reward in enumerate(rewards):
        steps = [Step(response_ids=[1] * (position + 1), reward=0.0), Step(response_ids=[1], reward=reward)]
        trajectories.append(
            Trajectory(name="solver", reward=reward, steps=steps, info={k: v[position] for k, v in info.items()})
        )
    return TrajectoryGroup.for_task(task, "solver", trajectories)


def step_advantages(group: TrajectoryGroup) -> list[list[float]]:
    return [[s.advantage for s in t.steps] for t in group.trajectories]  # type: ignore[misc]


def test_opo_reads_response_lengths_from_the_steps() -> None:
    # lengths: trajectory 0 has 1 + 1 = 2 tokens, trajectory 1 has 2 + 1 = 3;
    # baseline (2 * 1 + 3 * 0) / 5 = 0.4 -> 0.6 and -0.4 on every step
    group = make_group("t", [1.0, 0.0])
    collect([group], AlgorithmConfig(estimator="opo"))
    assert step_advantages(group) == [[pytest.approx(0.6)] * 2, [pytest.approx(-0.4)] * 2]


def test_remax_reads_the_baseline_reward_from_trajectory_info() -> None:
    group = make_group("t", [1.0, 0.0], baseline_reward=[0.25, 0.25])
    collect([group], AlgorithmConfig(estimator="remax"))
    assert step_advantages(group) == [[0.75, 0.75], [-0.25, -0.25]]
    missing = make_group("t", [1.0, 0.0])
    with pytest.raises(MissingInputError, match=r"'remax'.*'baseline_rewards'"):
        collect([missing], AlgorithmConfig(estimator="remax"))


def test_gdpo_reads_named_reward_components() -> None:
    # component "format" [1, 0] and "answer" [0, 1] with equal weights cancel: every advantage 0
    group = make_group(
        "t", [1.0, 1.0], reward_components=[{"format": 1.0, "answer": 0.0}, {"answer": 1.0, "format": 0.0}]
    )
    collect([group], AlgorithmConfig(estimator="gdpo"))
    assert step_advantages(group) == [[pytest.approx(0.0, abs=1e-9)] * 2] * 2


def test_per_step_estimator_gives_each_step_its_own_advantage() -> None:
    # step rewards [0, 1] and [0, 0], gamma 1: returns [1, 1] and [0, 0]; mean 0.5, population std 0.5:
    # (1 - 0.5) / (0.5 + 1e-6) = 0.999998 and -0.999998
    group = make_group("t", [1.0, 0.0])
    metrics = collect([group], AlgorithmConfig(estimator="reinforce_plus_plus"))
    assert step_advantages(group) == [[pytest.approx(0.999998)] * 2, [pytest.approx(-0.999998)] * 2]
    assert metrics["advantage/solver/mean"] == pytest.approx(0.0, abs=1e-12)


def test_mix_from_config_options() -> None:
    # 0.5 * grpo [0.999998, -0.999998] + 0.5 * rloo [1, -1] = [0.999999, -0.999999]
    group = make_group("t", [1.0, 0.0])
    config = AlgorithmConfig(estimator="mix", estimator_options={"mix": {"components": "0.5*grpo + 0.5*rloo"}})
    collect([group], config)
    assert step_advantages(group) == [[pytest.approx(0.999999)] * 2, [pytest.approx(-0.999999)] * 2]


def test_fields_nobody_asks_for_are_never_built() -> None:
    calls: list[str] = []

    def source() -> list[float]:
        calls.append("built")
        return [1.0, 2.0]

    batch = AdvantageBatch([1.0, 0.0], [0, 0], sources={"response_lengths": source})
    assert calls == []
    assert batch.require("response_lengths", "opo").tolist() == [1.0, 2.0]
    assert batch.response_lengths.tolist() == [1.0, 2.0]
    assert calls == ["built"]
