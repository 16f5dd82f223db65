"""What an estimator hands back reaches the caller as a writable float array of its own."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import rllm
from rllm.errors import EstimatorNotFoundError
from rllm.estimators.list_api import register_rllm_adv_estimator
from rllm.plugins.manager import PluginManager


def _writable_input(batch: Any) -> Any:
    rewards = batch.rewards
    with contextlib.suppress(ValueError):  # numpy may refuse on a view of a read-only array
        rewards.setflags(write=True)
    return rewards


OUTPUTS: dict[str, Callable[[Any], Any]] = {
    "half": lambda batch: batch.rewards.astype(np.float16),
    "boolean": lambda batch: batch.rewards > 0,
    "its_input": lambda batch: batch.rewards,
    "input_made_writable": _writable_input,
}


@pytest.fixture
def estimators(plugin_manager: PluginManager) -> Iterator[None]:
    for name, fn in OUTPUTS.items():
        register_rllm_adv_estimator(name, style="batch")(fn)
    yield


@pytest.mark.parametrize("name", sorted(OUTPUTS))
def test_outputs_are_owned_float_arrays(estimators: None, name: str) -> None:
    rewards = np.array([1.0, 0.0, 2.0])
    got = rllm.compute_advantages(name, rewards, [0, 0, 0])
    assert got.dtype == np.float64 and got.flags.writeable
    assert not np.may_share_memory(got, rewards)
    got[0] = 99.0  # the caller may change its result without touching its input
    assert rewards.tolist() == [1.0, 0.0, 2.0]


def test_unknown_name_error_is_bounded(plugin_manager: PluginManager) -> None:
    for i in range(2000):
        register_rllm_adv_estimator(f"user_estimator_{i:04d}")(lambda rewards, **_: (rewards, rewards))
    with pytest.raises(EstimatorNotFoundError) as caught:
        rllm.compute_advantages("no_such_estimator", [1.0, 0.0], [0, 0])
    message = str(caught.value)
    assert len(message) < 2000, len(message)
    assert "more (`rllm plugins` lists them all)" in message


@pytest.mark.parametrize(
    ("rewards", "needle"),
    [
        (np.array([2**63 - 1, 2**63 - 2]), "beyond 2\\*\\*53"),  # as floats both are 2**63: advantages 0, 0
        ([10**400, 0], "an integer of 401 digits"),
        ((r for r in [1.0, 0.0]), "got a generator; pass list"),
    ],
)
def test_rewards_that_cannot_become_floats_are_refused(rewards: Any, needle: str) -> None:
    from rllm.errors import RewardError

    with pytest.raises(RewardError, match=needle):
        rllm.compute_advantages("grpo", rewards, [0, 0])


def test_collection_refuses_a_reward_too_large_for_a_float() -> None:
    from rllm.errors import RewardError
    from rllm.types import Step, Trajectory, TrajectoryGroup

    group = TrajectoryGroup.for_task("t", "solver", [Trajectory(reward=r, steps=[Step()]) for r in (10**400, 0)])
    with pytest.raises(RewardError, match="an integer of 401 digits"):
        rllm.collect_reward_and_advantage_from_trajectory_groups([group], rllm.AlgorithmConfig())


@pytest.mark.parametrize("eps", [float("inf"), float("nan")])
def test_non_finite_eps_is_refused(eps: float) -> None:
    from rllm.errors import EstimatorOptionError

    with pytest.raises(EstimatorOptionError, match=r"'eps' of estimator 'grpo'.*must be a finite number"):
        rllm.compute_advantages("grpo", [1.0, 0.0], [0, 0], eps=eps)


def test_explicit_preset_is_checked_for_an_estimator_without_numerics() -> None:
    from rllm.errors import ConfigError

    with pytest.raises(ConfigError, match="Unknown numerics preset 'nonexistent'"):
        rllm.compute_advantages("ema_baseline", [1.0, 0.0], [0, 0], preset="nonexistent")
    # A known preset is accepted and, as ema_baseline has no numerics, changes nothing: 1 - 0.5, 0 - 0.5.
    assert rllm.compute_advantages("ema_baseline", [1.0, 0.0], [0, 0], preset="verl").tolist() == [0.5, -0.5]


def test_mix_cannot_contain_itself() -> None:
    from rllm.errors import ConfigError

    with pytest.raises(ConfigError, match="'mix' cannot be one of its own components"):
        rllm.compute_advantages("mix", [1.0, 0.0], [0, 0], components="0.5*mix + 0.5*grpo")
    config = rllm.AlgorithmConfig(estimator="mix", estimator_options={"mix": {"components": "1*mix"}})
    with pytest.raises(ConfigError, match="'mix' cannot be one of its own components"):
        _collect(config)


def test_mix_refuses_a_stateful_component_by_name() -> None:
    # mix could not carry ema_baseline's baselines from one step to the next, nor save them.
    from rllm.errors import EstimatorOptionError

    match = r"Estimator 'ema_baseline' \(.*\) keeps state across training steps"
    with pytest.raises(EstimatorOptionError, match=match):
        rllm.compute_advantages("mix", [1.0, 0.0], [0, 0], components="0.5*grpo + 0.5*ema_baseline")
    config = rllm.AlgorithmConfig(estimator="mix", estimator_options={"mix": {"components": {"ema_baseline": 1}}})
    with pytest.raises(EstimatorOptionError, match=match):
        _collect(config)


def _collect(config: Any) -> None:
    from rllm.types import Trajectory, TrajectoryGroup

    group = TrajectoryGroup.for_task("a", "solver", [Trajectory(name="solver", reward=r) for r in (1.0, 0.0)])
    rllm.collect_reward_and_advantage_from_trajectory_groups([group], config)
