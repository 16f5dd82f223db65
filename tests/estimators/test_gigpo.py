"""GiGPO: the anchor-state grouping hook and the estimator, on an example worked by hand."""

from __future__ import annotations

import dataclasses
import math
import warnings

import numpy as np
import pytest

import rllm
from rllm.errors import InputFieldError, RLLMWarning
from rllm.estimators.collect import collect_advantages
from rllm.trainer.components import resolve_grouping_hook
from rllm.types import Episode, Step, Trajectory


def _rollout(task: str, k: int, states: list[str | None], rewards: list[float], key: str = "obs") -> Episode:
    """One rollout: a step per state, taken from that state (as ``observation`` or ``info['state_key']``)."""
    steps = []
    for state, reward in zip(states, rewards, strict=True):
        step = Step(prompt_ids=[0], response_ids=[1], reward=reward)
        if key == "obs":
            step.observation = state
        elif state is not None:
            step.info["state_key"] = state
        steps.append(step)
    return Episode(id=f"{task}:{k}", trajectories=[Trajectory(name="agent", steps=steps, reward=sum(rewards))])


def _episodes(key: str = "obs") -> list[Episode]:
    """Task A: three rollouts from s0 (two reach s1); task B: two one-step rollouts from its own s0."""
    return [
        _rollout("A", 0, ["s0", "s1"], [0.0, 1.0], key),
        _rollout("A", 1, ["s0", "s1"], [0.0, 0.0], key),
        _rollout("A", 2, ["s0"], [0.5], key),
        _rollout("B", 0, ["s0"], [1.0], key),
        _rollout("B", 1, ["s0"], [0.0], key),
    ]


def _hook(**options: object):
    config = rllm.load_config(overrides=["rllm.grouping_hook=anchor_states"])
    for name, value in options.items():
        config.rllm.grouping_hook_options[name] = value
    return resolve_grouping_hook(None, config)


def _flat(rows: list[list[float]]) -> list[float]:
    return [value for row in rows for value in row]


def _advantages(episodes: list[Episode], **fields: object) -> list[float]:
    """Every step's advantage after the hook and the collection step, trajectory by trajectory."""
    groups = _hook()(episodes)
    config = dataclasses.replace(rllm.AlgorithmConfig(estimator="gigpo"), **fields)
    collect_advantages(groups, config)
    return [s.advantage for g in groups for t in g.trajectories for s in t.steps]


# Task A, gamma 0.5. Episode rewards 1, 0, 0.5: mean 0.5, so A_E = +0.5, -0.5, 0.
# Step returns R_t = r_t + 0.5 R_{t+1}: rollout 0 [0 + 0.5 * 1, 1] = [0.5, 1]; rollout 1 [0, 0]; rollout 2 [0.5].
# State s0 (all three first steps): returns 0.5, 0, 0.5, mean 1/3, A_S = +1/6, -1/3, +1/6.
# State s1 (the second steps of rollouts 0 and 1): returns 1, 0, mean 1/2, A_S = +1/2, -1/2.
# A = A_E + A_S: rollout 0 [1/2 + 1/6, 1/2 + 1/2] = [2/3, 1]; rollout 1 [-5/6, -1]; rollout 2 [1/6].
# Task B (its s0 is not task A's): rewards 1, 0, A_E = +-1/2; its s0 returns 1, 0, A_S = +-1/2: [1], [-1].
BY_HAND = [[2 / 3, 1.0], [-5 / 6, -1.0], [1 / 6], [1.0], [-1.0]]


def test_episode_and_step_advantages_add_up_as_worked_by_hand() -> None:
    assert _advantages(_episodes(), gamma=0.5) == pytest.approx(_flat(BY_HAND), abs=1e-6)


def test_the_workflow_s_state_key_groups_as_the_observation_does() -> None:
    assert _advantages(_episodes(key="info"), gamma=0.5) == pytest.approx(_flat(BY_HAND), abs=1e-6)


def test_omega_and_mean_std_norm_by_hand() -> None:
    # mean_std_norm under verl's numerics (unbiased std, eps 1e-6), omega 0.5, gamma 0.5.
    # Task A: rewards 1, 0, 0.5 have std sqrt((0.25 + 0.25 + 0) / 2) = 0.5, A_E = +1, -1, 0.
    # s0: deviations +1/6, -1/3, +1/6, std sqrt((1/36 + 4/36 + 1/36) / 2) = sqrt(1/12): A_S = +-1/sqrt(3) ...
    # s1: 1, 0, std sqrt(1/2): A_S = +-1/sqrt(2). Task B: A_E = +-0.5/sqrt(1/2) = +-1/sqrt(2), A_S the same.
    s3, s2 = 1 / math.sqrt(3), 1 / math.sqrt(2)
    expected = [
        [1 + 0.5 * s3, 1 + 0.5 * s2],
        [-1 - 0.5 * 2 * s3, -1 - 0.5 * s2],
        [0 + 0.5 * s3],
        [1.5 * s2],
        [-1.5 * s2],
    ]
    got = _advantages(_episodes(), gamma=0.5, estimator_options={"gigpo": {"omega": 0.5, "mode": "mean_std_norm"}})
    assert got == pytest.approx(_flat(expected), rel=1e-5)


def test_compute_advantages_takes_the_states_as_a_field() -> None:
    rewards = [1.0, 0.0, 0.5, 1.0, 0.0]
    got = rllm.compute_advantages(
        "gigpo",
        rewards,
        ["A", "A", "A", "B", "B"],
        step_rewards=[[0.0, 1.0], [0.0, 0.0], [0.5], [1.0], [0.0]],
        anchor_states=[[0, 1], [0, 1], [0], [0], [0]],  # task B's 0 is its own state
        gamma=0.5,
    )
    assert got.values.tolist() == pytest.approx(_flat(BY_HAND), abs=1e-6)


def test_a_group_without_state_keys_falls_back_to_episode_groups_with_a_warning() -> None:
    episodes = [_rollout("A", k, [None, None], [0.0, r]) for k, r in enumerate([1.0, 0.0])]
    with pytest.warns(RLLMWarning, match=r"group 'A:agent' has no state keys .* falls back to episode groups"):
        got = _advantages(episodes, gamma=1.0)
    # every step is its own state (A_S = 0): each step has its trajectory's A_E, +-1/2
    assert got == pytest.approx([0.5, 0.5, -0.5, -0.5])


def test_groups_with_state_keys_do_not_warn() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", RLLMWarning)
        _hook()(_episodes())


def test_gigpo_without_the_hook_names_the_field_and_the_hook() -> None:
    groups = resolve_grouping_hook("task_and_role", rllm.load_config())(_episodes())
    with pytest.raises(InputFieldError, match=r"'anchor_states'.*rllm.grouping_hook=anchor_states"):
        collect_advantages(groups, rllm.AlgorithmConfig(estimator="gigpo"))


def test_the_hook_takes_task_and_role_options_and_refuses_others() -> None:
    assert len(_hook(state_key="room", drop_unnamed_traj=False)(_episodes())) == 2
    with pytest.raises(rllm.ConfigError, match="not an option of grouping hook 'anchor_states'"):
        _hook(state="room")


def test_numpy_states_compare_by_value() -> None:
    episodes = [_rollout("A", k, [None], [float(k)]) for k in range(2)]
    for episode in episodes:
        episode.trajectories[0].steps[0].observation = np.array([1, 2])
    groups = _hook()(episodes)
    assert [t.steps[0].info["anchor_state"] for t in groups[0].trajectories] == [0, 0]
