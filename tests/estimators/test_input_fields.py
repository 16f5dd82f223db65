"""Inputs beyond rewards are checked where the batch takes them: one rule for every estimator reading them."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import rllm
from rllm import AlgorithmConfig, Step, Trajectory, TrajectoryGroup
from rllm.errors import InputFieldError
from rllm.plugins.manager import PluginManager
from rllm.plugins.registry import Source
from rllm.toolkit import BatchField

REWARDS = [1.0, 0.0, 3.0, 1.0]
GROUPS = ["a", "a", "b", "b"]


@pytest.mark.parametrize("bad", [math.nan, -2.0, math.inf])
def test_opo_refuses_unusable_lengths_naming_the_field_group_and_position(bad: float) -> None:
    # before: opo fell back to the plain group mean for a NaN or negative total
    with pytest.raises(InputFieldError, match=r"'response_lengths'.*position 2 in group 'b'"):
        rllm.compute_advantages("opo", REWARDS, GROUPS, response_lengths=[3, 1, bad, 2])


def test_opo_and_token_whitening_share_the_length_rule() -> None:
    for name, options in (("opo", {}), ("grpo", {"preset": "openrlhf"})):
        with pytest.raises(InputFieldError, match=r"'response_lengths'.*position 1 in group 'a'"):
            rllm.compute_advantages(name, REWARDS, GROUPS, response_lengths=[3, -1, 2, 2], **options)


NAN = math.nan


@pytest.mark.parametrize(
    ("estimator", "fields", "where"),
    [
        ("remax", {"baseline_rewards": [0.5, 0.5, NAN, 0.5]}, r"position 2 in group 'b'"),
        ("reinforce_plus_plus", {"step_rewards": [[0.0, 1.0], [0.0], [NAN], [3.0]]}, r"position 2 in group 'b'"),
        (
            "gae",
            {"step_rewards": [[1.0], [0.0], [3.0], [1.0]], "step_values": [[0.5], [math.inf], [0.5], [0.5]]},
            r"position 1 in group 'a'",
        ),
    ],
    ids=["baseline_rewards", "step_rewards", "step_values"],
)
def test_a_nan_input_is_named_as_the_input_not_as_the_estimator_output(
    estimator: str, fields: dict[str, object], where: str
) -> None:
    # before: "estimator returned non-finite advantages"
    name = list(fields)[-1]
    with pytest.raises(InputFieldError, match=rf"batch field {name!r}.*unusable; the first is at {where}"):
        rllm.compute_advantages(estimator, REWARDS, GROUPS, **fields)


def test_a_nan_component_weight_is_named() -> None:
    with pytest.raises(InputFieldError, match=r"component_weights\[1\] is nan"):
        rllm.compute_advantages(
            "gdpo", REWARDS, GROUPS, reward_components=[[1, 0]] * 4, component_weights=[1.0, math.nan]
        )


@pytest.mark.parametrize("bad", ["0.5", 0.5 + 1j, object(), b"1"], ids=["str", "complex", "object", "bytes"])
def test_a_field_value_that_is_no_real_number_is_refused_naming_field_and_place(bad: object) -> None:
    # before: numpy's bare ValueError/TypeError, or "0.5" converted and 1j dropped
    with pytest.raises(InputFieldError, match=r"'baseline_rewards' at position 1 in group 'a' is .*real numbers"):
        rllm.compute_advantages("remax", REWARDS, GROUPS, baseline_rewards=[0.5, bad, 0.5, 0.5])
    with pytest.raises(InputFieldError, match=r"'step_rewards' at position 3 in group 'b', step 1 is"):
        rllm.compute_advantages("reinforce_plus_plus", REWARDS, GROUPS, step_rewards=[[1.0], [0.0], [3.0], [1.0, bad]])


def test_an_unscored_rollout_may_lack_its_other_inputs() -> None:
    # reward NaN, excluded: its NaN baseline is never read; remax by hand on the others: r - 0.5
    got = rllm.compute_advantages(
        "remax", [1.0, NAN, 3.0, 1.0], GROUPS, baseline_rewards=[0.5, NAN, 0.5, 0.5], nonfinite_rewards="exclude"
    )
    assert got.tolist() == [0.5, 0.0, 2.5, 0.5]


class DifficultyPlugin:
    @rllm.hookimpl
    def rllm_register_batch_fields(self, register: Any) -> None:
        register("difficulty", BatchField(read=lambda t: t.info["difficulty"], doc="number: how hard"))


def weighted(batch: rllm.AdvantageBatch) -> np.ndarray:
    return np.asarray(batch.rewards) * np.asarray(batch.require("difficulty", "weighted"))


@pytest.fixture
def difficulty(plugin_manager: PluginManager) -> PluginManager:
    plugin_manager.register(DifficultyPlugin(), Source("plugin", "rllm-difficulty"))
    rllm.register_rllm_adv_estimator("weighted", style="batch", requires=["difficulty"])(weighted)
    return plugin_manager


def test_a_nan_in_a_plugin_field_is_named(difficulty: PluginManager) -> None:
    with pytest.raises(InputFieldError, match=r"'difficulty' are unusable; the first is at position 3 in group 'b'"):
        rllm.compute_advantages("weighted", REWARDS, GROUPS, difficulty=[1.0, 1.0, 1.0, math.nan])


def test_a_plugin_field_read_that_fails_names_the_field_plugin_and_trajectory(difficulty: PluginManager) -> None:
    # before: a bare KeyError from the plugin's read()
    trajectories = [Trajectory(uid="u0", reward=1.0, steps=[Step()], info={"difficulty": 2.0})]
    trajectories.append(Trajectory(uid="u1", reward=0.0, steps=[Step()], info={}))
    group = TrajectoryGroup.for_task("t", "solver", trajectories)
    with pytest.raises(InputFieldError, match=r"'difficulty' \(.*rllm-difficulty.*\).*trajectory 'u1'.*KeyError"):
        rllm.collect_reward_and_advantage_from_trajectory_groups([group], AlgorithmConfig(estimator="weighted"))
