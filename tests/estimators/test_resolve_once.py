"""Resolve once at the door: each door asks the plugin manager once per call, and what it resolved suffices.

The doors: ``rllm.compute_advantages``, the list API (``get_rllm_adv_estimator`` and the
``calculate_*`` functions), the collection step, ``rllm advantages``' estimating pass and the
verl bridge. Every module that bound ``get_plugin_manager`` is patched with a counter, and so
is the single-kernel lookup ``rllm.estimators.acceleration.kernel``: once the door has
resolved the kernels, no layout or statistic should look one up by name. Then the manager is
made to raise, and a batch and its layout built from a :class:`Resolved` still do all their work.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rllm
from rllm import AlgorithmConfig, Step, Trajectory, TrajectoryGroup
from rllm.errors import EstimatorNotFoundError, MissingInputError
from rllm.estimators import acceleration
from rllm.estimators.acceleration import NO_KERNELS
from rllm.estimators.pipeline import invoke
from rllm.experimental.common import advantage as list_api
from rllm.plugins import manager as manager_module
from rllm.plugins.manager import PluginManager
from rllm.plugins.registry import Source
from rllm.toolkit import AdvantageBatch, BatchField, GroupLayout, Kernels, Resolved, numpy_only, resolve_plugins

RLOO_REWARDS = [1.0, 3.0, 0.0, 4.0, 8.0]
RLOO_LABELS = np.array([0, 0, 1, 1, 1], dtype=np.int64)
RLOO_BY_HAND = [-2.0, 2.0, -6.0, 0.0, 6.0]
"""Each reward minus the mean of the others in its group: 1 - 3, 3 - 1; 0 - 6, 4 - 4, 8 - 2."""


def grpo_by_formula(rewards: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """GRPO group by group with numpy's mean and population std, eps 1e-6; a lone reward has mean 0 and std 1."""
    out = np.empty_like(rewards)
    for label in np.unique(labels):
        members = labels == label
        group = rewards[members]
        mean, std = (0.0, 1.0) if len(group) == 1 else (group.mean(), group.std())
        out[members] = (group - mean) / (std + 1e-6)
    return out


class SpyKernels:
    """Kernels that do the numpy path's work (``group_centre`` declines it) and record each call."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def sorted_runs(self, labels: np.ndarray) -> int | None:
        self.calls.append("sorted_runs")
        if np.any(labels[1:] < labels[:-1]):
            return None
        return int(np.count_nonzero(labels[1:] != labels[:-1])) + 1

    def run_starts(self, labels: np.ndarray, count: int) -> np.ndarray:
        self.calls.append("run_starts")
        starts = np.concatenate(([0], np.flatnonzero(labels[1:] != labels[:-1]) + 1)).astype(np.intp)
        assert len(starts) == count
        return starts

    def group_centre(self, xs: np.ndarray, layout: Any, mode: int, numerics: Any) -> None:
        self.calls.append("group_centre")
        return None

    @rllm.hookimpl
    def rllm_register_kernels(self, register: Callable[..., None]) -> None:
        for name in acceleration.PRIMITIVES:
            register(name, getattr(self, name))

    @rllm.hookimpl
    def rllm_register_batch_fields(self, register: Any) -> None:
        register("difficulty", BatchField(read=lambda t: t.info["difficulty"], doc="number: how hard"))


@pytest.fixture
def spy(plugin_manager: PluginManager) -> SpyKernels:
    """The built-in plugin, the spy kernels and a declared field ``difficulty``, as the process-wide manager."""
    kernels = SpyKernels()
    plugin_manager.register(kernels, Source("plugin", "spy-kernels"))
    return kernels


def patch_lookups(monkeypatch: pytest.MonkeyPatch, refuse: bool = False) -> list[str]:
    """Record every call of ``get_plugin_manager`` (wherever a module bound it) and of ``acceleration.kernel``.

    With ``refuse`` each such call raises instead: nothing may ask the plugins any more.
    """
    calls: list[str] = []
    real = manager_module.get_plugin_manager
    real_kernel = acceleration.kernel

    def counted(*args: Any, **kwargs: Any) -> PluginManager:
        calls.append("manager")
        if refuse:
            raise AssertionError("the plugin manager was asked after the door had resolved what the call needs")
        return real(*args, **kwargs)

    def kernel(name: str) -> Any:
        calls.append(f"kernel {name}")
        if refuse:
            raise AssertionError(f"kernel {name!r} was looked up by name after the door had resolved the kernels")
        return real_kernel(name)

    for module in list(sys.modules.values()):
        try:
            bound = module.__dict__.get("get_plugin_manager") if module is not None else None
        except Exception:  # a module object without a plain namespace
            continue
        if bound is real:
            monkeypatch.setattr(module, "get_plugin_manager", counted)
    monkeypatch.setattr(manager_module, "get_plugin_manager", counted)
    monkeypatch.setattr(rllm, "get_plugin_manager", counted)
    monkeypatch.setattr(acceleration, "kernel", kernel)
    return calls


@pytest.fixture
def lookups(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    return patch_lookups(monkeypatch)


def test_compute_advantages_asks_once_and_uses_the_kernels_it_resolved(spy: SpyKernels, lookups: list[str]) -> None:
    rewards = np.array([1.0, 2.0, 6.0, 5.0, 0.0, 4.0, 3.0])
    labels = np.repeat(np.array([3, 7, 9], dtype=np.int64), [3, 1, 3])  # sorted and ragged: every kernel is asked
    got = rllm.compute_advantages("grpo", rewards, labels)
    np.testing.assert_allclose(got, grpo_by_formula(rewards, labels), rtol=1e-12)
    assert lookups == ["manager"]
    assert spy.calls == ["sorted_runs", "group_centre", "run_starts"]


def test_compute_advantages_with_a_declared_field_asks_once(spy: SpyKernels, lookups: list[str]) -> None:
    def weighted(batch: rllm.AdvantageBatch) -> np.ndarray:
        return np.asarray(batch.rewards) * np.asarray(batch.require("difficulty", "weighted"))

    rllm.register_rllm_adv_estimator("weighted", style="batch", requires=["difficulty"])(weighted)
    lookups.clear()
    got = rllm.compute_advantages("weighted", [1.0, 2.0, 3.0], ["a", "a", "b"], difficulty=[2.0, 0.5, 1.0])
    assert got.tolist() == [2.0, 1.0, 3.0]
    assert lookups == ["manager"]


def test_compute_advantages_asks_once_per_call(lookups: list[str]) -> None:
    for _ in range(3):
        assert rllm.compute_advantages("rloo", RLOO_REWARDS, RLOO_LABELS).tolist() == RLOO_BY_HAND
    assert lookups == ["manager"] * 3


def test_the_list_api_asks_once_per_call(spy: SpyKernels, lookups: list[str]) -> None:
    groups = [np.array([1.0, 3.0]), np.array([0.0, 4.0, 8.0])]
    rloo = list_api.get_rllm_adv_estimator("rloo")
    lookups.clear()
    advantages, _ = rloo(groups)
    assert [a.tolist() for a in advantages] == [[-2.0, 2.0], [-6.0, 0.0, 6.0]]
    assert lookups == ["manager"]
    lookups.clear()
    advantages, _ = list_api.calculate_rloo_advantages(groups)
    assert [a.tolist() for a in advantages] == [[-2.0, 2.0], [-6.0, 0.0, 6.0]]
    assert lookups == ["manager"]
    assert "group_centre" in spy.calls  # the kernels the door resolved reached the statistics


def test_the_collection_step_asks_once_for_every_role(spy: SpyKernels, lookups: list[str]) -> None:
    def group(task: str, role: str, rewards: list[float]) -> TrajectoryGroup:
        trajectories = [Trajectory(uid=f"{task}{i}", reward=r, steps=[Step()]) for i, r in enumerate(rewards)]
        return TrajectoryGroup.for_task(task, role, trajectories)

    groups = [group("t0", "solver", [1.0, 3.0]), group("t1", "solver", [0.0, 4.0, 8.0]), group("t2", "judge", [2.0])]
    config = AlgorithmConfig(estimator="rloo", estimator_map={"judge": "reinforce"})
    rllm.collect_advantages(groups, config)
    assert lookups == ["manager"]
    advantages = [t.steps[0].advantage for g in groups for t in g.trajectories]
    assert advantages == [*RLOO_BY_HAND, 2.0]  # reinforce: the reward itself


def test_rllm_advantages_estimates_every_role_with_one_lookup(spy: SpyKernels, lookups: list[str]) -> None:
    from rllm.cli.advantages import Reader, estimate

    config = AlgorithmConfig(estimator="rloo", estimator_map={"judge": "reinforce"})
    reader = Reader("test.jsonl", config, set(), "advantage")
    lines = [(r, "g0" if i < 2 else "g1", "solver") for i, r in enumerate(RLOO_REWARDS)] + [(2.0, "g2", "judge")]
    for number, (reward, group, role) in enumerate(lines, start=1):
        reader.add(number, f'{{"reward": {reward}, "group_id": "{group}", "role": "{role}"}}\n'.encode())
    lookups.clear()
    advantages, _ = estimate(reader.columns, config, "test.jsonl")
    assert np.asarray(advantages).tolist() == [*RLOO_BY_HAND, 2.0]
    assert lookups == ["manager"]


def test_the_verl_bridge_asks_once(spy: SpyKernels, lookups: list[str]) -> None:
    torch = pytest.importorskip("torch")
    from rllm_verl.inside_verl import run_for_verl

    # Two tokens per response: the reward sits on the first, the second is padding (mask 0).
    token_rewards = torch.tensor([[r, 0.0] for r in RLOO_REWARDS], dtype=torch.float64)
    mask = torch.tensor([[1.0, 0.0]] * len(RLOO_REWARDS), dtype=torch.float64)
    got = run_for_verl("rloo", token_rewards, mask, RLOO_LABELS.astype(object), None, None)
    assert got[:, 0].tolist() == RLOO_BY_HAND and got[:, 1].tolist() == [0.0] * 5
    assert lookups == ["manager"]


# -- what the door resolved is all a batch and its layout need ------------------------------------------------------


def weighted(batch: rllm.AdvantageBatch) -> np.ndarray:
    return np.asarray(batch.rewards) * np.asarray(batch.require("difficulty", "weighted"))


@pytest.fixture
def resolved(spy: SpyKernels) -> Resolved:
    rllm.register_rllm_adv_estimator("weighted", style="batch", requires=["difficulty"])(weighted)
    return resolve_plugins("grpo", "weighted")


def test_a_layout_works_from_the_resolved_kernels_with_the_manager_refusing(
    spy: SpyKernels, resolved: Resolved, monkeypatch: pytest.MonkeyPatch
) -> None:
    patch_lookups(monkeypatch, refuse=True)
    labels = np.repeat(np.array([3, 7, 9], dtype=np.int64), [3, 1, 3])
    layout = GroupLayout(labels, kernels=resolved.kernels)
    assert layout.unlocated_runs is not None  # the spy's sorted_runs counted the runs and left them unlocated
    assert layout.sizes.tolist() == [3, 1, 3] and layout.labels.tolist() == [3, 7, 9]
    assert spy.calls == ["sorted_runs", "run_starts"]
    assert layout.kernels is resolved.kernels
    assert GroupLayout.from_sizes([2, 3], kernels=resolved.kernels).kernels is resolved.kernels


def test_a_batch_works_from_the_resolved_value_with_the_manager_refusing(
    spy: SpyKernels, resolved: Resolved, monkeypatch: pytest.MonkeyPatch
) -> None:
    rewards = np.array([1.0, 2.0, 6.0, 5.0, 0.0, 4.0, 3.0])
    labels = np.repeat(np.array([3, 7, 9], dtype=np.int64), [3, 1, 3])
    difficulty = [2.0, 1.0, 1.0, 0.5, 1.0, 1.0, 3.0]
    patch_lookups(monkeypatch, refuse=True)

    def batch(values: np.ndarray = rewards) -> AdvantageBatch:
        return AdvantageBatch(
            values, labels, kernels=resolved.kernels, fields=resolved.fields, extra={"difficulty": difficulty}
        )

    got = invoke(resolved.entry("grpo"), batch(), {}).advantages
    np.testing.assert_allclose(got, grpo_by_formula(rewards, labels), rtol=1e-12)
    assert "group_centre" in spy.calls
    assert invoke(resolved.entry("weighted"), batch(), {}).advantages.tolist() == (rewards * difficulty).tolist()
    with pytest.raises(MissingInputError, match=r"'difficullty'.*Did you mean 'difficulty'\?.*difficulty"):
        batch().require("difficullty", "misspelt")
    # An unscorable rollout left out: the estimator runs on a subset built from the same resolved value.
    unscored = rewards.copy()
    unscored[1] = np.nan
    got = invoke(resolved.entry("grpo"), batch(unscored), {}, nonfinite_rewards="exclude").advantages
    kept = ~np.isnan(unscored)
    expected = np.zeros_like(rewards)
    expected[kept] = grpo_by_formula(rewards[kept], labels[kept])
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    sub = batch().subset(kept)
    assert sub.layout.kernels is resolved.kernels
    assert np.asarray(sub.require("difficulty", "weighted")).tolist() == [2.0, 1.0, 0.5, 1.0, 1.0, 3.0]


def test_a_declared_field_from_a_source_is_known_from_the_resolved_fields(
    resolved: Resolved, monkeypatch: pytest.MonkeyPatch
) -> None:
    patch_lookups(monkeypatch, refuse=True)
    reads: list[str] = []
    sources = {"difficulty": lambda: reads.append("difficulty") or [4.0, 0.5]}
    batch = AdvantageBatch([1.0, 2.0], ["a", "a"], kernels=resolved.kernels, fields=resolved.fields, sources=sources)
    assert reads == []  # read only when asked
    assert invoke(resolved.entry("weighted"), batch, {}).advantages.tolist() == [4.0, 1.0]
    assert reads == ["difficulty"]


def test_numpy_only_applies_when_a_resolved_kernel_would_be_used(spy: SpyKernels) -> None:
    resolved = resolve_plugins("grpo")
    labels = np.repeat(np.array([3, 7, 9], dtype=np.int64), [3, 1, 3])
    with numpy_only():
        assert resolved.kernels.get("group_centre") is None
        layout = GroupLayout(labels, kernels=resolved.kernels)
        assert layout.unlocated_runs is None and layout.sizes.tolist() == [3, 1, 3]
    assert spy.calls == []
    assert resolved.kernels.get("group_centre") == spy.group_centre


def test_the_kernels_value_has_one_field_per_primitive() -> None:
    assert tuple(field.name for field in dataclasses.fields(Kernels)) == acceleration.PRIMITIVES
    assert all(NO_KERNELS.get(name) is None for name in acceleration.PRIMITIVES)


def test_a_layout_built_without_kernels_looks_them_up_once_and_only_when_needed(
    spy: SpyKernels, lookups: list[str]
) -> None:
    GroupLayout(["a", "b", "a"])  # strings never take a kernel
    GroupLayout.from_sizes([2, 3])
    assert lookups == []
    layout = GroupLayout(np.repeat(np.array([3, 7, 9], dtype=np.int64), [3, 1, 3]))
    assert layout.sizes.tolist() == [3, 1, 3]
    assert lookups == ["manager"]
    assert spy.calls == ["sorted_runs", "run_starts"]


def test_resolved_names_its_entries(spy: SpyKernels) -> None:
    resolved = resolve_plugins("grpo", "rloo")
    assert resolved.entry("rloo").name == "rloo" and resolved.entry(rllm.rLLMAdvantageEstimator.GRPO).name == "grpo"
    with pytest.raises(KeyError, match="2 estimators were resolved"):
        resolved.entry()
    assert resolved.fields["difficulty"].doc == "number: how hard"
    assert resolved.field_sources["difficulty"].plugin == "spy-kernels"
    with pytest.raises(EstimatorNotFoundError, match="Unknown estimator 'gpro'"):
        resolve_plugins("gpro")
    with pytest.raises(EstimatorNotFoundError, match="OTHER only marks a custom estimator"):
        resolve_plugins(rllm.rLLMAdvantageEstimator.OTHER)


def test_the_rllm_advantages_command_reads_and_estimates_with_the_fields_it_resolved(
    spy: SpyKernels, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """After the command resolves (its config loaded), reading the lines and estimating ask the plugins nothing."""
    from rllm.cli import advantages
    from rllm.cli.main import build_parser

    def weighted(batch: rllm.AdvantageBatch) -> np.ndarray:
        return np.asarray(batch.rewards) * np.asarray(batch.require("difficulty", "weighted"))

    rllm.register_rllm_adv_estimator("weighted", style="batch", requires=["difficulty"])(weighted)
    rollouts = tmp_path / "rollouts.jsonl"
    rollouts.write_text(
        '{"reward": 2.0, "group_id": "a", "difficulty": 3.0}\n{"reward": 1.0, "group_id": "a", "difficulty": 0.5}\n'
    )
    out = tmp_path / "scored.jsonl"
    args = build_parser().parse_args(["advantages", str(rollouts), "-e", "weighted", "-o", str(out)])
    resolved: list[Resolved] = []

    def resolve_then_refuse(*names: Any) -> Resolved:
        resolved.append(resolve_plugins(*names))
        patch_lookups(monkeypatch, refuse=True)
        return resolved[-1]

    monkeypatch.setattr(advantages, "resolve_plugins", resolve_then_refuse)
    assert args.run(args) == 0
    assert len(resolved) == 1
    # weighted: reward times difficulty, 2 * 3 and 1 * 0.5
    assert [json.loads(line)["advantage"] for line in out.read_text().splitlines()] == [6.0, 0.5]
