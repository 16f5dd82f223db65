"""The ``fast`` plugin (``rllm[fast]``): its compiled primitives agree with the toolkit's numpy path.

The plugin is installed with rllm and registered through its own entry point; these tests use
the process-wide plugin manager, as users do, and hide or break numba where they need to.
"""

from __future__ import annotations

import importlib.util
import multiprocessing
import os
import subprocess
import sys
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import rllm
import rllm_fast
from rllm.errors import ConfigError, EstimatorOutputError, GroupError, PluginWarning
from rllm.toolkit import DIVIDE_BY_STD, PRESETS, GroupLayout, kernel, numpy_only, resolve_numerics
from rllm_fast import parts, plugin
from rllm_fast.primitives import FastPrimitives

HAS_NUMBA = importlib.util.find_spec("numba") is not None
needs_numba = pytest.mark.skipif(not HAS_NUMBA, reason="numba is not installed (pip install 'rllm[fast]')")

ESTIMATORS: list[tuple[str, dict[str, Any]]] = [
    ("grpo", {}),
    ("grpo", {"norm_adv_by_std_in_grpo": False}),
    ("dr_grpo", {}),
    ("grpo_batch_std", {}),
    ("rloo", {}),
    ("reinforce_plus_plus_baseline", {}),
    ("gpg", {}),
]


@st.composite
def grouped(draw: Any) -> tuple[np.ndarray, np.ndarray, str]:
    """Rewards (multiples of 1/8, so sums are exact in any order) and int64 labels: equal, ragged or shuffled."""
    kind = draw(st.sampled_from(["equal", "ragged", "shuffled"]))
    n_groups = draw(st.integers(1, 12))
    if kind == "equal":
        sizes = [draw(st.integers(1, 9))] * n_groups
    else:
        sizes = draw(st.lists(st.integers(1, 9), min_size=n_groups, max_size=n_groups))
    first = draw(st.integers(-3, 3))
    gaps = draw(st.lists(st.integers(1, 3), min_size=n_groups, max_size=n_groups))
    labels = np.repeat(first + np.cumsum(gaps), sizes).astype(np.int64)
    if kind == "shuffled":
        labels = labels[draw(st.permutations(range(len(labels))))]
    values = draw(st.lists(st.integers(-40, 40), min_size=len(labels), max_size=len(labels)))
    return np.array(values, dtype=np.float64) / 8, labels, kind


numerics_options = st.fixed_dictionaries(
    {},
    optional={
        "preset": st.sampled_from(sorted(PRESETS)),
        "std": st.sampled_from(["population", "unbiased"]),
        "eps": st.sampled_from([0.0, 1e-9, 1e-6, 1e-2]),
        "single": st.sampled_from(["raw", "zero", "error"]),
        "zero_variance": st.sampled_from(["eps", "zero"]),
        "dtype": st.sampled_from(["float64", "float32"]),
    },
)


def split(count: int) -> Any:
    """Cut even the smallest batch into up to ``count`` parts, so that tiny examples exercise the threads."""
    return rllm_fast.threads(count, min_part=1)


def read_only(array: np.ndarray) -> np.ndarray:
    view = array.view()
    view.flags.writeable = False
    return view


def advantages_or_error(name: str, rewards: np.ndarray, labels: np.ndarray, options: dict[str, Any]) -> Any:
    try:
        return rllm.compute_advantages(name, rewards, labels, **options)
    except (GroupError, EstimatorOutputError) as error:  # e.g. single="error", or 0/0 with eps=0
        return f"{type(error).__name__}: {error}"


@needs_numba
def test_the_plugin_provides_every_primitive_through_the_registry() -> None:
    assert kernel("group_centre") == plugin.PRIMITIVES.group_centre
    assert kernel("sorted_runs") == plugin.PRIMITIVES.sorted_runs
    assert kernel("run_starts") == plugin.PRIMITIVES.run_starts
    with numpy_only():
        assert kernel("group_centre") is None


@needs_numba
@pytest.mark.parametrize("parts_", [1, 3])
@pytest.mark.parametrize(("name", "own"), ESTIMATORS)
# a drawn token-whitening preset without response lengths warns (tests/estimators/test_token_whitening.py)
@pytest.mark.filterwarnings("ignore:.*whitens over tokens, but the batch has no response lengths")
@settings(max_examples=80, deadline=None)
@given(data=grouped(), options=numerics_options, frozen=st.booleans())
@example(  # constant groups with eps=0: both paths must refuse the 0/0 alike
    data=(np.zeros(12), np.repeat(np.arange(4, dtype=np.int64), [1, 4, 2, 5]), "ragged"),
    options={"eps": 0.0},
    frozen=False,
)
def test_fast_path_equals_numpy_path(
    name: str,
    own: dict[str, Any],
    parts_: int,
    data: tuple[np.ndarray, np.ndarray, str],
    options: dict[str, Any],
    frozen: bool,
) -> None:
    rewards, labels, _ = data
    if frozen:  # read-only inputs take the same compiled loops
        rewards, labels = read_only(rewards), read_only(labels)
    with split(parts_):
        fast = advantages_or_error(name, rewards, labels, own | options)
    with numpy_only():
        slow = advantages_or_error(name, rewards, labels, own | options)
    if isinstance(slow, str):
        assert fast == slow
        return
    assert fast.dtype == slow.dtype
    rtol = 1e-12 if slow.dtype == np.float64 else 1e-5
    np.testing.assert_allclose(fast, slow, rtol=rtol, atol=rtol * max(1.0, float(np.nanmax(np.abs(slow)))))


@needs_numba
@settings(max_examples=100, deadline=None)
@given(data=grouped())
def test_fast_layout_detection_equals_numpy(data: tuple[np.ndarray, np.ndarray, str]) -> None:
    _, labels, _ = data
    fast = GroupLayout(labels)
    with numpy_only():
        slow = GroupLayout(labels)
    assert (fast.codes is None) == (slow.codes is None)
    assert fast.uniform_size == slow.uniform_size
    for field in ("labels", "sizes", "starts", "group_index"):
        np.testing.assert_array_equal(getattr(fast, field), getattr(slow, field))
        assert getattr(fast, field).dtype == getattr(slow, field).dtype


@needs_numba
@pytest.mark.parametrize(
    ("sizes", "used"),
    [
        ([8, 8, 8], {"count_sorted_runs", "centre_equal"}),
        ([1, 3, 2, 5], {"count_sorted_runs", "centre_runs"}),
    ],
)
def test_the_loops_run_for_contiguous_groups(monkeypatch: pytest.MonkeyPatch, sizes: list[int], used: set[str]) -> None:
    """The equality tests compare two paths only if the compiled one actually runs."""
    calls: list[str] = []
    real = plugin.PRIMITIVES.loops()
    assert real is not None

    class Spy:
        def __getattr__(self, name: str) -> Any:
            calls.append(name)
            return getattr(real, name)

    monkeypatch.setattr(plugin.PRIMITIVES, "_loops", Spy())
    rllm.compute_advantages("grpo", np.arange(sum(sizes), dtype=float), np.repeat(np.arange(len(sizes)), sizes))
    assert set(calls) == used
    calls.clear()
    with numpy_only():
        rllm.compute_advantages("grpo", np.arange(sum(sizes), dtype=float), np.repeat(np.arange(len(sizes)), sizes))
    assert calls == []


@needs_numba
def test_one_compilation_serves_writable_and_read_only_inputs() -> None:
    """Inputs are typed read-only, so neither kind compiles in the middle of a call, and no loop can write them."""
    loops = plugin.PRIMITIVES.loops()
    sorted_ragged = np.repeat(np.array([3, 5, 6], dtype=np.int64), [2, 4, 1])
    layouts = [sorted_ragged, np.arange(7), sorted_ragged.astype(np.int32)]  # runs found by the loop, equal, located
    for dtype in (np.float64, np.float32):
        rewards = np.array([1.0, 3.0, 0.0, 4.0, 4.0, 0.0, 7.0], dtype=dtype)
        for labels in layouts:
            expected = rllm.compute_advantages("grpo", rewards, labels)
            frozen = rllm.compute_advantages("grpo", read_only(rewards), read_only(labels))
            np.testing.assert_array_equal(frozen, expected)
    for name in ("centre_equal", "centre_ragged", "centre_runs"):
        signatures = getattr(loops, name).signatures
        assert len(signatures) == 2, name  # float64 and float32, compiled when the module loaded
        assert all(not signature[0].mutable for signature in signatures)
    assert len(loops.count_sorted_runs.signatures) == 1


@needs_numba
@pytest.mark.parametrize("parts_", [1, 2, 3, 8])
def test_the_kernel_locates_the_runs_of_sorted_ragged_labels(parts_: int) -> None:
    """Sorted ragged labels are only counted up front; group_centre finds the runs and the layout keeps them."""
    labels = read_only(np.repeat(np.array([-4, 0, 9, 10], dtype=np.int64), [3, 1, 2, 2]))
    rewards = read_only(np.array([1.0, 2.0, 3.0, 5.0, 0.0, 4.0, 1.0, 1.0]))
    layout = GroupLayout(labels)
    assert layout.unlocated_runs is not None and layout.n_groups == 4
    with split(parts_):
        advantages = plugin.PRIMITIVES.group_centre(rewards, layout, DIVIDE_BY_STD, resolve_numerics())
    assert layout.unlocated_runs is None
    np.testing.assert_array_equal(layout.starts, [0, 3, 4, 6])
    np.testing.assert_array_equal(layout.sizes, [3, 1, 2, 2])
    np.testing.assert_array_equal(layout.labels, [-4, 0, 9, 10])
    # By hand: [1, 2, 3] has mean 2 and population std sqrt(2/3); [0, 4] has mean 2 and std 2;
    # the lone 5 keeps its reward (mean 0, std 1); [1, 1] has std 0, so only eps remains.
    s = np.sqrt(2 / 3)
    expected = [-1 / (s + 1e-6), 0.0, 1 / (s + 1e-6), 5 / (1 + 1e-6), -2 / (2 + 1e-6), 2 / (2 + 1e-6), 0.0, 0.0]
    np.testing.assert_allclose(advantages, expected, rtol=1e-12)


@needs_numba
def test_unlocated_runs_are_found_when_asked() -> None:
    labels = np.repeat(np.array([2, 5, 7], dtype=np.int64), [2, 3, 1])
    layout = GroupLayout(labels)
    assert layout.unlocated_runs is not None
    np.testing.assert_array_equal(layout.sizes, [2, 3, 1])  # via the plugin's run_starts
    assert layout.unlocated_runs is None
    np.testing.assert_array_equal(layout.labels, [2, 5, 7])
    np.testing.assert_array_equal(layout.group_index, [0, 0, 1, 1, 1, 2])


def test_without_numba_the_plugin_registers_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    real_find_spec = importlib.util.find_spec

    def find_spec(name: str, *args: Any) -> Any:
        return None if name == "numba" else real_find_spec(name, *args)

    registered: list[str] = []
    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    plugin.rllm_register_kernels(register=lambda name, fn, **options: registered.append(name))
    assert registered == []
    monkeypatch.undo()
    plugin.rllm_register_kernels(register=lambda name, fn, **options: registered.append(name))
    assert registered == (["group_centre", "sorted_runs", "run_starts"] if HAS_NUMBA else [])


def run_python(code: str, **env: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, **env}, check=False
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_import_rllm_and_loading_the_plugin_do_not_import_numba() -> None:
    code = (
        "import sys, rllm, rllm_fast.plugin\n"
        "from rllm.toolkit import kernel\n"
        "kernel('group_centre')\n"  # every plugin is loaded now
        "print('numba' in sys.modules)"
    )
    assert run_python(code) == "False"


def test_a_process_without_numba_computes_on_the_numpy_path() -> None:
    code = (
        "import sys\n"
        "sys.modules['numba'] = None\n"  # find_spec('numba') is None, as if it were not installed
        "import rllm\n"
        "from rllm.toolkit import kernel\n"
        "print([kernel(name) for name in ('group_centre', 'sorted_runs', 'run_starts')])\n"
        "print(rllm.compute_advantages('grpo', [1.0, 0.0, 1.0, 0.5, 2.0], [3, 3, 3, 7, 7]).round(6).tolist())"
    )
    # by hand: mean 2/3 and std sqrt(2)/3 in the first group, so (1/3) / (sqrt(2)/3 + 1e-6) = 0.7071053;
    # mean 1.25 and std 0.75 in the second, so 0.75 / 0.750001 = 0.9999987
    assert run_python(code).splitlines() == [
        "[None, None, None]",
        "[0.707105, -1.414211, 0.707105, -0.999999, 0.999999]",
    ]


@needs_numba
def test_users_disable_the_plugin_by_name() -> None:
    code = "from rllm.toolkit import kernel\nprint(kernel('group_centre'), kernel('sorted_runs'))"
    assert run_python(code, RLLM_DISABLED_PLUGINS="fast") == "None None"
    assert run_python(code) != "None None"


def test_a_broken_numba_warns_once_and_leaves_the_numpy_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """numba found but failing to import (say, built for another numpy): one warning, the same results."""
    monkeypatch.setitem(sys.modules, "numba", None)  # import numba now raises ImportError
    monkeypatch.delitem(sys.modules, "rllm_fast.loops", raising=False)
    primitives = FastPrimitives()
    labels = np.repeat(np.array([2, 5, 7], dtype=np.int64), [2, 3, 1])
    with pytest.warns(PluginWarning, match=r"'fast' could not compile its kernels \(\w+Error: .*numba.*=fast"):
        assert primitives.loops() is None
    layout = GroupLayout(labels)
    assert primitives.group_centre(np.ones(6), layout, DIVIDE_BY_STD, resolve_numerics()) is None
    assert primitives.sorted_runs(labels) == 3
    assert primitives.sorted_runs(labels[::-1].copy()) is None
    np.testing.assert_array_equal(primitives.run_starts(labels, 3), [0, 2, 5])
    assert primitives.loops() is None  # no second attempt, no second warning


def test_parts_keep_order_and_raise_errors() -> None:
    workers = parts.Workers()
    with split(4):
        assert parts.part_count(10) == 4
        assert workers.run_all([lambda i=i: i * i for i in range(6)]) == [0, 1, 4, 9, 16, 25]

        def broken() -> int:
            raise ValueError("part 2 failed")

        with pytest.raises(ValueError, match="part 2 failed"):
            workers.run_all([lambda: 1, broken])
    assert parts.part_count(parts.MIN_PART - 1) == 1


def test_a_growing_pool_leaves_the_smaller_one_usable() -> None:
    """A caller that fetched the pool just before another call enlarged it can still submit to it."""
    workers = parts.Workers()
    earlier = workers.executor(1)
    assert workers.executor(5) is not earlier
    assert earlier.submit(lambda: 7).result(timeout=10) == 7


def test_thread_settings_are_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(parts.THREADS_VAR, "two")
    with pytest.raises(ConfigError, match="RLLM_KERNEL_THREADS='two'"):
        parts.thread_count()
    monkeypatch.setenv(parts.THREADS_VAR, "1")
    assert parts.part_count(10 * parts.MIN_PART) == 1
    with split(3):  # the block's setting beats the environment
        assert parts.thread_count() == 3
    with pytest.raises(ConfigError, match=r"threads\(0, min_part=1\)"), split(0):
        pass


def _grpo_in_child(queue: Any) -> None:
    with split(2):
        queue.put(rllm.compute_advantages("grpo", [1.0, 0.0, 2.0, 2.0], [0, 0, 1, 1]).tolist())


@needs_numba
@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX-only")
def test_a_forked_child_gets_its_own_threads() -> None:
    """A forked child inherits the pool object but not its threads; it must not wait on them forever."""
    with split(2):
        rllm.compute_advantages("grpo", [1.0, 0.0, 2.0, 2.0], [0, 0, 1, 1])  # the parent's pool now exists
    assert plugin.PRIMITIVES.workers._pool is not None
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_grpo_in_child, args=(queue,))
    child.start()
    child.join(timeout=60)
    assert child.exitcode == 0
    assert queue.get(timeout=5) == pytest.approx([1 / (0.5 + 1e-6) * 0.5, -0.5 / (0.5 + 1e-6), 0.0, 0.0])


@st.composite
def uniform_groups(draw: Any) -> tuple[np.ndarray, np.ndarray]:
    """Groups (up to 1000 rollouts) whose rollouts share one non-dyadic reward, in equal, ragged or shuffled layouts.

    A float32 running sum of such a group drifts from its mean, which is how uniform groups once got
    advantages near +1 under the float32 presets; multiples of 1/8 (``grouped``) never drift.
    """
    kind = draw(st.sampled_from(["equal", "ragged", "shuffled"]))
    n_groups = draw(st.integers(1, 4))
    if kind == "equal":
        sizes = [draw(st.integers(2, 1000))] * n_groups
    else:
        sizes = draw(st.lists(st.integers(2, 1000), min_size=n_groups, max_size=n_groups))
    numerators = draw(st.lists(st.integers(-30, 30), min_size=n_groups, max_size=n_groups))
    denominator = draw(st.sampled_from([3, 7, 10, 11, 100]))
    rewards = np.repeat(np.array(numerators, dtype=np.float64) / denominator, sizes)
    labels = np.repeat(np.arange(n_groups, dtype=np.int64), sizes)
    if kind == "shuffled":
        order = np.random.default_rng(draw(st.integers(0, 2**32 - 1))).permutation(len(labels))
        rewards, labels = rewards[order], labels[order]
    return rewards, labels


@needs_numba
@pytest.mark.parametrize("preset", sorted(PRESETS))
@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "rloo", "gpg", "grpo_batch_std"])
@settings(max_examples=25, deadline=None)
@given(data=uniform_groups())
@example(data=(np.full(8, 0.7), np.zeros(8, dtype=np.int64)))
def test_uniform_groups_get_zero_advantage_on_both_paths(name: str, preset: str, data: Any) -> None:
    rewards, labels = data
    with split(2):
        fast = rllm.compute_advantages(name, rewards, labels, preset=preset)
    with numpy_only():
        slow = rllm.compute_advantages(name, rewards, labels, preset=preset)
    # Every rollout equals its group's mean, so every advantage is 0. A float32 reward is summed in float64
    # and its mean rounds back to the reward exactly; a float64 sum keeps a residue of about n ulps, which
    # 1 / (std + eps) can magnify to at most n * 2**-52 * |reward| / 1e-6 (under 1e-6 here).
    tolerance = 0.0 if fast.dtype == np.float32 else 1e-6
    assert np.abs(fast).max() <= tolerance, f"fast path: {np.abs(fast).max()} for uniform groups"
    assert np.abs(slow).max() <= tolerance, f"numpy path: {np.abs(slow).max()} for uniform groups"


@needs_numba
@pytest.mark.parametrize("preset", sorted(PRESETS))
@settings(max_examples=40, deadline=None)
@given(data=grouped(), denominator=st.sampled_from([3, 7, 10]))
def test_fast_path_equals_numpy_path_on_rewards_that_do_not_sum_exactly(
    preset: str, data: tuple[np.ndarray, np.ndarray, str], denominator: int
) -> None:
    """Non-dyadic rewards: the two paths add in different orders but agree within float32 rounding."""
    rewards, labels, _ = data
    rewards = rewards * 8 / denominator
    with numpy_only():
        slow = advantages_or_error("grpo", rewards, labels, {"preset": preset})
    fast = advantages_or_error("grpo", rewards, labels, {"preset": preset})
    if isinstance(slow, str):
        assert fast == slow
        return
    np.testing.assert_allclose(fast, slow, rtol=1e-5, atol=1e-5 * max(1.0, float(np.abs(slow).max())))
