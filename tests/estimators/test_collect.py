"""Collection: per-role batching, estimator_map, precomputed mode, metrics, and bad rewards."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import rllm
from rllm import AlgorithmConfig, RewardError, RLLMWarning, Step, Trajectory, TrajectoryGroup
from rllm.experimental.common.advantage import collect_reward_and_advantage_from_trajectory_groups as collect


def group(task: str, role: str, rewards: list[float | None], steps: int = 2) -> TrajectoryGroup:
    trajectories = [Trajectory(name=role, reward=r, steps=[Step() for _ in range(steps)]) for r in rewards]
    return TrajectoryGroup.for_task(task, role, trajectories)


def advantages(g: TrajectoryGroup) -> list[list[float | list[float] | None]]:
    return [[s.advantage for s in t.steps] for t in g.trajectories]


def test_broadcast_to_every_step_and_metric_names() -> None:
    g = group("t1", "solver", [1.0, 0.0, 0.0, 0.0])
    metrics = collect([g], AlgorithmConfig())
    # mean 0.25, population std sqrt(3)/4: (1 - 0.25) / (sqrt(3)/4 + 1e-6) and -0.25 / (sqrt(3)/4 + 1e-6)
    first = 0.75 / (math.sqrt(3) / 4 + 1e-6)
    assert advantages(g)[0] == [pytest.approx(first)] * 2
    assert advantages(g)[1] == [pytest.approx(-0.25 / (math.sqrt(3) / 4 + 1e-6))] * 2
    assert metrics["reward/solver/mean"] == pytest.approx(0.25)
    assert metrics["reward/solver/std"] == pytest.approx(math.sqrt(3) / 4)
    assert metrics["reward/solver/max"] == 1.0 and metrics["reward/solver/min"] == 0.0
    assert metrics["advantage/solver/mean"] == pytest.approx(0.0, abs=1e-12)
    assert metrics["advantage/solver/fraction_zero"] == 0.0
    diagnostics = {"total", "informative", "fractions/effective", "fractions/too_easy", "fractions/too_hard"} | {
        f"group_reward_{s}/p{p}" for s in ("mean", "std") for p in (10, 50, 90)
    }
    assert set(metrics) == {f"reward/solver/{k}" for k in ("mean", "std", "max", "min")} | {
        f"advantage/solver/{k}" for k in ("mean", "std", "max", "min", "fraction_zero")
    } | {f"batch/solver/{k}" for k in diagnostics}


def test_roles_are_batched_separately_with_estimator_map() -> None:
    solver = group("t1", "solver", [1.0, 3.0])
    judge = group("t1", "judge", [1.0, 3.0])
    config = AlgorithmConfig(estimator="grpo", estimator_map={"judge": "rloo"})
    collect([solver, judge], config)
    # GRPO on [1, 3]: +-1 / (1 + 1e-6); RLOO: each minus the other, -2 and +2.
    assert advantages(solver)[0][0] == pytest.approx(-1 / (1 + 1e-6))
    assert advantages(judge)[0][0] == pytest.approx(-2.0)
    assert advantages(judge)[1][0] == pytest.approx(2.0)


def test_role_level_batch_statistics_span_groups_of_one_role() -> None:
    # REINFORCE++-baseline whitens over all groups of a role: centred [-1, 1] and [-2, 2]; population std of
    # [-1, 1, -2, 2] is sqrt(10/4).
    a, b = group("t1", "r", [0.0, 2.0]), group("t2", "r", [0.0, 4.0])
    collect([a, b], AlgorithmConfig(estimator="reinforce_plus_plus_baseline"))
    assert advantages(b)[1][0] == pytest.approx(2 / (math.sqrt(2.5) + 1e-6))


def test_precomputed_mode_keeps_advantages_and_fills_missing_with_zero() -> None:
    steps = [
        Step(response_ids=[1, 2], advantage=0.5),
        Step(response_ids=[3], advantage=None),
        Step(response_ids=[4, 5], advantage=[0.1, 0.2]),
    ]
    g = TrajectoryGroup.for_task("t", "student", [Trajectory(reward=None, steps=steps)])
    metrics = collect([g], AlgorithmConfig(use_precomputed_advantage=True))
    assert [s.advantage for s in steps] == [[0.5, 0.5], [0.0], [0.1, 0.2]]  # one value per token, as rLLM
    # Per token: 0.5, 0.5, 0.0, 0.1, 0.2.
    assert metrics["advantage/student/mean"] == pytest.approx(1.3 / 5)
    assert metrics["advantage/student/fraction_zero"] == pytest.approx(1 / 5)


def test_precomputed_list_of_wrong_length_becomes_zeros_with_warning() -> None:
    g = TrajectoryGroup.for_task("t", "s", [Trajectory(steps=[Step(response_ids=[1, 2, 3], advantage=[1.0])])])
    with pytest.warns(RLLMWarning, match="1 per-token advantages for 3 response tokens"):
        metrics = collect([g], AlgorithmConfig(use_precomputed_advantage=True))
    assert metrics["advantage/s/max"] == 0.0


def test_overwriting_precomputed_advantages_warns_and_names_estimator() -> None:
    g = group("t", "solver", [1.0, 0.0])
    g.trajectories[0].steps[0].advantage = 5.0
    with pytest.warns(RLLMWarning, match="1 step.*overwritten with 'grpo'"):
        collect([g], AlgorithmConfig())
    assert advantages(g)[0][0] == pytest.approx(1 / (1 + 2e-6))


def test_precomputed_values_are_counted_wherever_they_sit_and_values_follow_their_trajectory() -> None:
    """Groups of different sizes and step counts: every step gets its own trajectory's advantage."""
    groups = [group("a", "solver", [1.0, 3.0], steps=1), group("b", "solver", [2.0, 2.0, 5.0], steps=3)]
    groups[0].trajectories[1].steps[0].advantage = 0.5  # the last step of the first group
    groups[1].trajectories[2].steps[2].advantage = [0.1]  # a per-token list on the very last step
    with pytest.warns(RLLMWarning, match=r"\[role=solver\] 2 step\(s\) carried precomputed"):
        collect(groups, AlgorithmConfig(), collect_advantage=True)
    # Group a: mean 2, std 1. Group b: mean 3, std sqrt(2).
    assert advantages(groups[0]) == [[pytest.approx(-1 / (1 + 1e-6))], [pytest.approx(1 / (1 + 1e-6))]]
    low, high = -1 / (math.sqrt(2) + 1e-6), 2 / (math.sqrt(2) + 1e-6)
    assert advantages(groups[1]) == [[pytest.approx(low)] * 3, [pytest.approx(low)] * 3, [pytest.approx(high)] * 3]


def test_missing_reward_names_group_and_trajectory() -> None:
    g = group("task:7", "solver", [1.0, None])
    with pytest.raises(RewardError, match=rf"{g.trajectories[1].uid}.*position 1.*'task:7:solver'"):
        collect([g], AlgorithmConfig())


def test_nan_reward_rejected_naming_group_or_zeroed_by_option() -> None:
    bad, good = group("bad", "r", [1.0, float("nan")]), group("good", "r", [1.0, 3.0])
    with pytest.raises(RewardError, match="'bad:r'"):
        collect([good, bad], AlgorithmConfig())
    with pytest.warns(RLLMWarning, match="1 group.*'bad:r'"):
        metrics = collect([good, bad], AlgorithmConfig(nonfinite_rewards="zero"))
    assert advantages(bad) == [[0.0, 0.0], [0.0, 0.0]]
    assert advantages(good)[1][0] == pytest.approx(1 / (1 + 1e-6))
    assert metrics["reward/r/mean"] == 2.0  # only the finite group counts
    assert not any(np.isnan(v) for v in metrics.values())


def test_empty_input_gives_empty_metrics_without_warnings() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert collect([], AlgorithmConfig()) == {}
    with pytest.warns(RLLMWarning, match="no trajectories"):
        assert collect([TrajectoryGroup.for_task("t", "r", [])], AlgorithmConfig()) == {}


def test_rewards_only_mode_leaves_steps_alone() -> None:
    g = group("t", "r", [1.0, 0.0])
    metrics = collect([g], AlgorithmConfig(), collect_advantage=False)
    assert advantages(g) == [[None, None], [None, None]]
    assert set(metrics) == {f"reward/r/{k}" for k in ("mean", "std", "max", "min")}


def test_custom_estimator_named_in_config_resolves(plugin_manager: object) -> None:
    from rllm import load_config, register_rllm_adv_estimator

    @register_rllm_adv_estimator("halve")
    def halve(rewards: list[np.ndarray], **kwargs: object) -> list[np.ndarray]:
        return [r / 2 for r in rewards]

    config = AlgorithmConfig.from_config(load_config(overrides=["rllm.algorithm.adv_estimator=halve"]))
    g = group("t", "r", [4.0, 2.0])
    collect([g], config)
    assert advantages(g) == [[2.0, 2.0], [1.0, 1.0]]


def test_config_gamma_reaches_per_step_estimators() -> None:
    from rllm import load_config

    def returns_for(gamma: float) -> list[float]:
        steps = [Step(reward=0.0), Step(reward=1.0)]
        g = TrajectoryGroup.for_task("t", "r", [Trajectory(reward=1.0, steps=steps)])
        overrides = ["rllm.algorithm.adv_estimator=reinforce_plus_plus", f"rllm.algorithm.gamma={gamma}"]
        collect([g], AlgorithmConfig.from_config(load_config(overrides=overrides)))
        return [s.advantage for s in steps]  # type: ignore[misc]

    # gamma 1: returns [1, 1], nothing left after centring. gamma 0.5: returns [0.5, 1], centred to -0.25, +0.25.
    assert returns_for(1.0) == [pytest.approx(0.0), pytest.approx(0.0)]
    low, high = returns_for(0.5)
    assert low < 0 < high and low == pytest.approx(-high)


def test_array_path_gives_advantages_without_touching_steps() -> None:
    solver = group("t1", "solver", [1.0, 3.0], steps=2)
    judge = group("t1", "judge", [0.0, 4.0, 8.0], steps=1)
    config = AlgorithmConfig(estimator="rloo")
    collected = rllm.collect_advantages([solver, judge], config, write_steps=False)
    assert advantages(solver) == [[None, None], [None, None]]  # nothing written
    # RLOO by hand: [1, 3] -> [-2, 2]; [0, 4, 8] -> [-6, 0, 6].
    np.testing.assert_allclose(collected.roles["solver"].advantages, [-2.0, 2.0])
    values, index = collected.roles["solver"].per_step()
    np.testing.assert_allclose(values, [-2.0, -2.0, 2.0, 2.0])
    assert index.tolist() == [0, 0, 1, 1]
    assert collected.roles["judge"].trajectories == judge.trajectories
    assert collected.metrics == collect([solver, judge], config)  # same metrics as the documented function
    assert advantages(judge) == [[-6.0], [0.0], [6.0]]  # ...which writes the steps


def test_array_path_keeps_per_step_rows() -> None:
    g = group("t1", "solver", [0.0, 0.0], steps=2)
    for traj, step_rewards in zip(g.trajectories, ([1.0, 0.0], [0.0, 3.0]), strict=True):
        for step, r in zip(traj.steps, step_rewards, strict=True):
            step.reward = r
    config = AlgorithmConfig(estimator="reinforce_plus_plus", estimator_options={"whiten": "var_add"})
    collected = rllm.collect_advantages([g], config, write_steps=False)
    values, index = collected.roles["solver"].per_step()
    # returns-to-go (gamma 1): [1, 0] and [3, 3]; whitened with mean 7/4 and population var 27/16 (+1e-6 eps).
    returns = np.array([1.0, 0.0, 3.0, 3.0])
    np.testing.assert_allclose(values, (returns - 1.75) / np.sqrt(27 / 16 + 1e-6))
    assert index.tolist() == [0, 0, 1, 1]


def test_a_trajectory_in_two_groups_is_refused_naming_both() -> None:
    a = group("t1", "solver", [1.0, 0.0])
    b = TrajectoryGroup.for_task("t2", "solver", [a.trajectories[0], Trajectory(reward=1.0, steps=[Step()])])
    with pytest.raises(rllm.DataError, match=r"is in two groups, 't1:solver' and 't2:solver'"):
        collect([a, b], AlgorithmConfig())
    # The array path refuses it when a backend first reads the arrays.
    for step in (s for t in [*a.trajectories, *b.trajectories] for s in t.steps):
        step.advantage = None
    collected = rllm.collect_advantages([a, b], AlgorithmConfig(), write_steps=False)
    with pytest.raises(rllm.DataError, match=r"is in two groups"):
        collected.roles["solver"].per_step()


@pytest.mark.parametrize("reward", ["1.5", "abc", [1.0]])
def test_a_reward_that_is_not_a_number_is_refused_not_converted(reward: object) -> None:
    g = group("t", "solver", [1.0, 0.0])
    g.trajectories[0].reward = reward  # type: ignore[assignment]
    with pytest.raises(RewardError, match=rf"{g.trajectories[0].uid}.*has reward .*a reward is a real number"):
        collect([g], AlgorithmConfig())


def test_a_missing_reward_is_unscorable_under_the_exclude_policy() -> None:
    g = group("t", "solver", [None, 1.0, 0.0])
    metrics = collect([g], AlgorithmConfig(estimator="rloo", nonfinite_rewards="exclude"))
    assert advantages(g)[0] == [0.0, 0.0] and metrics["reward/solver/left_out"] == 1.0
    assert advantages(g)[1][0] == 1.0 and advantages(g)[2][0] == -1.0  # RLOO over [1, 0]
