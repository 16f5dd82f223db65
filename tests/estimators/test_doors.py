"""Every door to an estimator behaves the same: the same checks, the same options, the same numbers.

Doors: ``rllm.compute_advantages``, the collection step, ``get_rllm_adv_estimator(name)(...)``,
the ``calculate_*`` functions (built-in names only) and a ``mix`` component. Cases: a NaN
reward, a misspelt option, an ill-typed option, a built-in name replaced by user code, a
grouped-style plugin estimator and a batch-style one.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rllm
import rllm.toolkit
from rllm import AlgorithmConfig, Step, Trajectory, TrajectoryGroup
from rllm.cli.main import main as cli_main
from rllm.errors import EstimatorOptionError, EstimatorOutputError, RewardError
from rllm.experimental.common import advantage as list_api
from rllm.plugins.manager import PluginManager

REWARDS = [[1.0, 3.0], [0.0, 4.0, 8.0]]
"""Two groups; RLOO by hand: [-2, 2] and [-6, 0, 6] (each reward minus the mean of the others)."""

Door = Callable[[str, list[list[float]], dict[str, Any]], list[list[float]]]


def via_compute(name: str, groups: list[list[float]], options: dict[str, Any]) -> list[list[float]]:
    flat = [r for g in groups for r in g]
    labels = [i for i, g in enumerate(groups) for _ in g]
    values = np.asarray(rllm.compute_advantages(name, flat, labels, **options)).tolist()
    return _regroup(values, groups)


def via_collection(name: str, groups: list[list[float]], options: dict[str, Any]) -> list[list[float]]:
    trajectory_groups = [
        TrajectoryGroup.for_task(f"t{i}", "solver", [Trajectory(reward=r, steps=[Step()]) for r in g])
        for i, g in enumerate(groups)
    ]
    rllm.collect_reward_and_advantage_from_trajectory_groups(
        trajectory_groups, AlgorithmConfig(estimator=name, estimator_options={name: options})
    )
    return [[t.steps[0].advantage for t in g.trajectories] for g in trajectory_groups]


def via_lookup(name: str, groups: list[list[float]], options: dict[str, Any]) -> list[list[float]]:
    advantages, returns = list_api.get_rllm_adv_estimator(name)(rewards=[np.array(g) for g in groups], **options)
    assert [a.tolist() for a in advantages] == [r.tolist() for r in returns]
    return [a.tolist() for a in advantages]


def via_mix(name: str, groups: list[list[float]], options: dict[str, Any]) -> list[list[float]]:
    flat = [r for g in groups for r in g]
    labels = [i for i, g in enumerate(groups) for _ in g]
    values = rllm.compute_advantages("mix", flat, labels, components={name: {"weight": 1.0, **options}})
    return _regroup(np.asarray(values).tolist(), groups)


def via_cli(name: str, groups: list[list[float]], options: dict[str, Any]) -> list[list[float]]:
    """``rllm advantages`` on a JSON Lines file, options as config overrides, run in this process."""
    with tempfile.TemporaryDirectory() as folder:
        source, out = Path(folder) / "in.jsonl", Path(folder) / "out.jsonl"
        lines = [{"task_id": g, "reward": r} for g, group in enumerate(groups) for r in group]
        source.write_text("".join(json.dumps(line) + "\n" for line in lines))
        overrides = [f"rllm.algorithm.estimator_options.{name}.{k}={json.dumps(v)}" for k, v in options.items()]
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr):
            code = cli_main(["advantages", str(source), "-e", name, "-o", str(out), *overrides])
        if code != 0:
            raise CliError(stderr.getvalue())
        values = [json.loads(line)["advantage"] for line in out.read_text().splitlines()]
    return _regroup(values, groups)


class CliError(Exception):
    """The command line's one-line error, for matching against the other doors' exceptions."""


CALCULATE = {
    "rloo": "calculate_rloo_advantages",
    "grpo": "calculate_grpo_advantages",
    "reinforce": "calculate_reinforce_advantages",
}


def via_calculate(name: str, groups: list[list[float]], options: dict[str, Any]) -> list[list[float]]:
    advantages, _ = getattr(list_api, CALCULATE[name])([np.array(g) for g in groups], **options)
    return [a.tolist() for a in advantages]


def _regroup(values: list[float], groups: list[list[float]]) -> list[list[float]]:
    out, start = [], 0
    for g in groups:
        out.append(values[start : start + len(g)])
        start += len(g)
    return out


DOORS: dict[str, Door] = {
    "compute_advantages": via_compute,
    "collection": via_collection,
    "get_rllm_adv_estimator": via_lookup,
    "mix component": via_mix,
}
BUILTIN_DOORS: dict[str, Door] = {**DOORS, "calculate_*": via_calculate}


@pytest.mark.parametrize("door", BUILTIN_DOORS)
def test_same_numbers_at_every_door(door: str) -> None:
    got = BUILTIN_DOORS[door]("rloo", REWARDS, {})
    assert np.allclose(np.concatenate(got), [-2.0, 2.0, -6.0, 0.0, 6.0])


@pytest.mark.parametrize("door", BUILTIN_DOORS)
def test_nan_reward_is_the_same_named_error_at_every_door(door: str) -> None:
    with pytest.raises(RewardError, match=r"NaN or infinite.*group"):
        BUILTIN_DOORS[door]("rloo", [[1.0, math.nan], [0.0, 4.0]], {})


@pytest.mark.parametrize("door", BUILTIN_DOORS)
@pytest.mark.parametrize("reward", ["1", b"1", 1 + 0j, object()], ids=["str", "bytes", "complex", "object"])
def test_a_reward_that_is_no_real_number_is_the_same_named_error_at_every_door(door: str, reward: Any) -> None:
    # before: compute_advantages and the list API computed from "1" and dropped imaginary parts
    with pytest.raises(RewardError, match=r"reward.*a reward is a real number"):
        BUILTIN_DOORS[door]("rloo", [[1.0, reward], [0.0, 4.0]], {})  # type: ignore[list-item]


def as_strings(rewards: list[np.ndarray], **kwargs: Any) -> list[list[str]]:
    return [[str(r) for r in g] for g in rewards]


def as_complex(rewards: list[np.ndarray], **kwargs: Any) -> list[np.ndarray]:
    return [g + 1j for g in rewards]


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize("fn", [as_strings, as_complex])
def test_a_grouped_estimator_returning_no_real_numbers_is_refused_naming_it(
    door: str, fn: Callable[..., Any], plugin_manager: PluginManager
) -> None:
    rllm.register_rllm_adv_estimator("not_real")(fn)
    with pytest.raises(EstimatorOutputError, match=r"'not_real'.*dtype.*real numbers"):
        DOORS[door]("not_real", REWARDS, {})


@pytest.mark.parametrize("door", BUILTIN_DOORS)
def test_misspelt_option_is_the_same_named_error_at_every_door(door: str) -> None:
    with pytest.raises(EstimatorOptionError, match=r"'rloo'.*no option 'singel'.*Did you mean 'single'"):
        BUILTIN_DOORS[door]("rloo", REWARDS, {"singel": "zero"})


@pytest.mark.parametrize("door", BUILTIN_DOORS)
@pytest.mark.parametrize(
    ("options", "pattern"),
    [
        ({"single": 3}, r"'single' of estimator 'rloo'.*one of 'raw', 'zero', 'error'"),
        ({"single": "zer"}, r"'single'.*got 'zer'.*Did you mean 'zero'"),
        ({"eps": "1e-4"}, r"'eps' of estimator 'rloo'.*must be a number; got str"),
        ({"norm_adv_by_std_in_grpo": "false"}, r"'norm_adv_by_std_in_grpo'.*must be a boolean"),
    ],
)
def test_ill_typed_option_is_the_same_named_error_at_every_door(
    door: str, options: dict[str, Any], pattern: str
) -> None:
    with pytest.raises(EstimatorOptionError, match=pattern):
        BUILTIN_DOORS[door]("rloo", REWARDS, options)


@pytest.mark.parametrize("door", [d for d in BUILTIN_DOORS if d != "collection"])  # collection: next test
def test_nonfinite_zero_policy_is_honoured_at_every_door(door: str) -> None:
    if door == "mix component":
        flat, labels = [1.0, math.nan, 0.0, 4.0], [0, 0, 1, 1]
        with pytest.warns(rllm.RLLMWarning, match="zero advantage"):
            values = rllm.compute_advantages("mix", flat, labels, components="rloo", nonfinite_rewards="zero")
        assert np.asarray(values).tolist() == [0.0, 0.0, -4.0, 4.0]
        return
    with pytest.warns(rllm.RLLMWarning, match="zero advantage"):
        got = BUILTIN_DOORS[door]("rloo", [[1.0, math.nan], [0.0, 4.0]], {"nonfinite_rewards": "zero"})
    assert got == [[0.0, 0.0], [-4.0, 4.0]]


def test_nonfinite_zero_policy_in_the_collection_step() -> None:
    groups = [
        TrajectoryGroup.for_task("a", "solver", [Trajectory(reward=r, steps=[Step()]) for r in (1.0, math.nan)]),
        TrajectoryGroup.for_task("b", "solver", [Trajectory(reward=r, steps=[Step()]) for r in (0.0, 4.0)]),
    ]
    with pytest.warns(rllm.RLLMWarning, match="'a:solver'"):
        metrics = rllm.collect_reward_and_advantage_from_trajectory_groups(
            groups, AlgorithmConfig(estimator="rloo", nonfinite_rewards="zero")
        )
    assert [[t.steps[0].advantage for t in g.trajectories] for g in groups] == [[0.0, 0.0], [-4.0, 4.0]]
    assert metrics["reward/solver/mean"] == 2.0  # the zeroed group is left out: mean of [0, 4]


def shift_by_ten(rewards: list[np.ndarray], **kwargs: Any) -> list[np.ndarray]:
    """Grouped style, returning only the advantages (no pair)."""
    return [g + 10.0 for g in rewards]


def doubled(batch: rllm.AdvantageBatch, *, factor: float) -> np.ndarray:
    return batch.rewards * factor


def test_replaced_builtin_name_is_used_by_every_door_but_calculate(plugin_manager: PluginManager) -> None:
    rllm.register_rllm_adv_estimator("rloo", replace=True)(shift_by_ten)
    for door, call in DOORS.items():
        assert call("rloo", REWARDS, {}) == [[11.0, 13.0], [10.0, 14.0, 18.0]], door
    # calculate_rloo_advantages keeps meaning the built-in RLOO, as the documented API promises.
    assert np.allclose(np.concatenate(via_calculate("rloo", REWARDS, {})), [-2.0, 2.0, -6.0, 0.0, 6.0])


@pytest.mark.parametrize("door", DOORS)
def test_grouped_plugin_estimator_gives_the_same_numbers_at_every_door(
    door: str, plugin_manager: PluginManager
) -> None:
    rllm.register_rllm_adv_estimator("shift_by_ten")(shift_by_ten)
    assert DOORS[door]("shift_by_ten", REWARDS, {}) == [[11.0, 13.0], [10.0, 14.0, 18.0]]


@pytest.mark.parametrize("door", DOORS)
def test_batch_plugin_estimator_gives_the_same_numbers_and_checks_at_every_door(
    door: str, plugin_manager: PluginManager
) -> None:
    factor = rllm.toolkit.Option("factor", (float,), 2.0, "multiplier")
    rllm.register_rllm_adv_estimator("doubled", style="batch", options=[factor])(doubled)
    assert DOORS[door]("doubled", REWARDS, {}) == [[2.0, 6.0], [0.0, 8.0, 16.0]]
    assert DOORS[door]("doubled", REWARDS, {"factor": 3}) == [[3.0, 9.0], [0.0, 12.0, 24.0]]
    with pytest.raises(EstimatorOptionError, match=r"'factor'.*must be a number"):
        DOORS[door]("doubled", REWARDS, {"factor": "3"})
    with pytest.raises(EstimatorOptionError, match=r"no option 'facter'.*Did you mean 'factor'"):
        DOORS[door]("doubled", REWARDS, {"facter": 3})


@pytest.mark.parametrize("door", [d for d in BUILTIN_DOORS if d not in ("collection", "mix component")])
def test_nonfinite_exclude_policy_is_honoured_at_every_door(door: str) -> None:
    # Group [1, 3, NaN] is RLOO over [1, 3] -> [-2, 2] and 0 for the unscorable rollout.
    got = BUILTIN_DOORS[door]("rloo", [[1.0, 3.0, math.nan], [0.0, 4.0]], {"nonfinite_rewards": "exclude"})
    assert got == [[-2.0, 2.0, 0.0], [-4.0, 4.0]]


def test_nonfinite_exclude_policy_through_mix_and_collection() -> None:
    values = rllm.compute_advantages(
        "mix", [1.0, 3.0, math.nan], [0, 0, 0], components="rloo", nonfinite_rewards="exclude"
    )
    assert np.asarray(values).tolist() == [-2.0, 2.0, 0.0]
    group = TrajectoryGroup.for_task("a", "r", [Trajectory(reward=x, steps=[Step()]) for x in (1.0, 3.0, math.nan)])
    metrics = rllm.collect_reward_and_advantage_from_trajectory_groups(
        [group], AlgorithmConfig(estimator="rloo", nonfinite_rewards="exclude")
    )
    assert [t.steps[0].advantage for t in group.trajectories] == [-2.0, 2.0, 0.0]
    assert metrics["reward/r/left_out"] == 1.0
    assert metrics["reward/r/mean"] == 2.0  # over the scorable rollouts only


def test_the_command_line_door_gives_the_same_numbers_and_errors() -> None:
    got = via_cli("rloo", REWARDS, {})
    assert np.allclose(np.concatenate(got), [-2.0, 2.0, -6.0, 0.0, 6.0])
    with pytest.raises(CliError, match=r"'rloo'.*no option 'singel'.*Did you mean 'single'"):
        via_cli("rloo", REWARDS, {"singel": "zero"})
    with pytest.raises(CliError, match=r"'single' of estimator 'rloo'.*one of 'raw', 'zero', 'error'"):
        via_cli("rloo", REWARDS, {"single": 3})
    with pytest.raises(CliError, match=r"NaN or infinite; the first is line 2 of"):
        via_cli("rloo", [[1.0, math.nan], [0.0, 4.0]], {})


def test_the_command_line_door_runs_plugin_estimators_like_the_others(plugin_manager: PluginManager) -> None:
    rllm.register_rllm_adv_estimator("shift_by_ten")(shift_by_ten)
    factor = rllm.toolkit.Option("factor", (float,), 2.0, "multiplier")
    rllm.register_rllm_adv_estimator("doubled", style="batch", options=[factor])(doubled)
    assert via_cli("shift_by_ten", REWARDS, {}) == [[11.0, 13.0], [10.0, 14.0, 18.0]]
    assert via_cli("doubled", REWARDS, {"factor": 3}) == [[3.0, 9.0], [0.0, 12.0, 24.0]]
