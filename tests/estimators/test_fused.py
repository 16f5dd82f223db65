"""The optional numba kernels (``rllm[fast]``) agree with the numpy path, which runs whenever numba is unavailable."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
from contextlib import AbstractContextManager
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import rllm
from rllm.errors import ConfigError, EstimatorOutputError, GroupError
from rllm.estimators import fused, parallel
from rllm.estimators.batch import AdvantageBatch, GroupLayout
from rllm.estimators.compute import get_estimator
from rllm.estimators.numerics import PRESETS

needs_numba = pytest.mark.skipif(fused.kernels() is None, reason="numba is not installed (pip install 'rllm[fast]')")

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


def threads(count: int) -> AbstractContextManager[None]:
    """Cut even the smallest batch into up to ``count`` parts, so that tiny examples exercise the parallel split."""
    return parallel.threads(count, min_part=1)


def advantages_or_error(name: str, rewards: np.ndarray, labels: np.ndarray, options: dict[str, Any]) -> Any:
    try:
        return rllm.compute_advantages(name, rewards, labels, **options)
    except (GroupError, EstimatorOutputError) as error:  # e.g. single="error", or 0/0 with eps=0
        return f"{type(error).__name__}: {error}"


@needs_numba
@pytest.mark.parametrize("parts", [1, 3])
@pytest.mark.parametrize(("name", "own"), ESTIMATORS)
@settings(max_examples=80, deadline=None)
@given(data=grouped(), options=numerics_options)
@example(  # constant groups with eps=0: both paths must refuse the 0/0 alike
    data=(np.zeros(12), np.repeat(np.arange(4, dtype=np.int64), [1, 4, 2, 5]), "ragged"), options={"eps": 0.0}
)
def test_fused_path_equals_numpy_path(
    name: str, own: dict[str, Any], parts: int, data: tuple[np.ndarray, np.ndarray, str], options: dict[str, Any]
) -> None:
    rewards, labels, _ = data
    with fused.path("fused"), threads(parts):
        fast = advantages_or_error(name, rewards, labels, own | options)
    with fused.path("numpy"):
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
def test_fused_layout_detection_equals_numpy(data: tuple[np.ndarray, np.ndarray, str]) -> None:
    _, labels, _ = data
    with fused.path("fused"):
        fast = GroupLayout(labels)
    with fused.path("numpy"):
        slow = GroupLayout(labels)
    assert (fast.codes is None) == (slow.codes is None)
    assert fast.uniform_size == slow.uniform_size
    for field in ("labels", "sizes", "starts", "group_index"):
        np.testing.assert_array_equal(getattr(fast, field), getattr(slow, field))
        assert getattr(fast, field).dtype == getattr(slow, field).dtype


@needs_numba
@pytest.mark.parametrize("sizes", [[8, 8, 8], [1, 3, 2, 5]])
def test_kernels_run_for_contiguous_groups(monkeypatch: pytest.MonkeyPatch, sizes: list[int]) -> None:
    """The equality tests compare two paths only if the fused one actually runs."""
    calls: list[str] = []
    real = fused.kernels()
    assert real is not None

    class Spy:
        def __getattr__(self, name: str) -> Any:
            calls.append(name)
            return getattr(real, name)

    monkeypatch.setattr(fused, "kernels", Spy)
    rllm.compute_advantages("grpo", np.arange(sum(sizes), dtype=float), np.repeat(np.arange(len(sizes)), sizes))
    assert "sorted_runs" in calls
    assert "centre" in calls


def test_numpy_path_runs_without_numba(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "numba", None)  # import numba now raises ImportError
    monkeypatch.setattr(fused, "_loaded", fused._UNSET)
    monkeypatch.delenv(fused.ENV_VAR, raising=False)
    assert fused.kernels() is None
    rewards, labels = np.array([1.0, 0.0, 1.0, 0.5, 2.0]), np.array([3, 3, 3, 7, 7])
    result = rllm.compute_advantages("grpo", rewards, labels)
    assert result[:3] == pytest.approx([1 / np.sqrt(2), -np.sqrt(2), 1 / np.sqrt(2)], rel=1e-5)
    assert result[3:] == pytest.approx([-1.0, 1.0], rel=1e-5)


def test_environment_variable_disables_the_fused_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(fused.ENV_VAR, "0")
    assert fused.kernels() is None


def test_import_rllm_does_not_import_numba() -> None:
    code = "import sys, rllm, rllm.estimators.batch; assert 'numba' not in sys.modules, 'numba imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


@needs_numba
@pytest.mark.parametrize("parts", [1, 2, 3, 8])
def test_kernel_locates_the_runs_of_sorted_ragged_labels(parts: int) -> None:
    """Sorted ragged labels are only counted up front; the GRPO kernel finds the runs and the layout keeps them."""
    labels = np.repeat(np.array([-4, 0, 9, 10], dtype=np.int64), [3, 1, 2, 2])
    rewards = np.array([1.0, 2.0, 3.0, 5.0, 0.0, 4.0, 1.0, 1.0])
    with fused.path("fused"), threads(parts):
        batch = AdvantageBatch(rewards, labels)
        assert batch.layout.unlocated_runs is not None and batch.layout.n_groups == 4
        advantages = get_estimator("grpo").target(batch)
    assert batch.layout.unlocated_runs is None
    np.testing.assert_array_equal(batch.layout.starts, [0, 3, 4, 6])
    np.testing.assert_array_equal(batch.layout.sizes, [3, 1, 2, 2])
    np.testing.assert_array_equal(batch.layout.labels, [-4, 0, 9, 10])
    # By hand: [1, 2, 3] has mean 2 and population std sqrt(2/3); [0, 4] has mean 2 and std 2;
    # the lone 5 keeps its reward (mean 0, std 1); [1, 1] has std 0, so only eps remains.
    s = np.sqrt(2 / 3)
    expected = [-1 / (s + 1e-6), 0.0, 1 / (s + 1e-6), 5 / (1 + 1e-6), -2 / (2 + 1e-6), 2 / (2 + 1e-6), 0.0, 0.0]
    np.testing.assert_allclose(advantages, expected, rtol=1e-12)


@needs_numba
def test_unlocated_runs_are_found_when_asked() -> None:
    labels = np.repeat(np.array([2, 5, 7], dtype=np.int64), [2, 3, 1])
    with fused.path("fused"):
        layout = GroupLayout(labels)
        assert layout.unlocated_runs is not None
        np.testing.assert_array_equal(layout.sizes, [2, 3, 1])
    assert layout.unlocated_runs is None
    np.testing.assert_array_equal(layout.labels, [2, 5, 7])
    np.testing.assert_array_equal(layout.group_index, [0, 0, 1, 1, 1, 2])


def test_parallel_parts_keep_order_and_raise_errors() -> None:
    with threads(4):
        assert parallel.part_count(10) == 4
        assert parallel.run_all([lambda i=i: i * i for i in range(6)]) == [0, 1, 4, 9, 16, 25]

        def broken() -> int:
            raise ValueError("part 2 failed")

        with pytest.raises(ValueError, match="part 2 failed"):
            parallel.run_all([lambda: 1, broken])
    assert parallel.part_count(parallel.MIN_PART - 1) == 1


def test_a_growing_pool_leaves_the_smaller_one_usable() -> None:
    """A caller that fetched the pool just before another call enlarged it can still submit to it."""
    earlier = parallel._executor(1)
    parallel._executor(5)
    assert earlier.submit(lambda: 7).result(timeout=10) == 7


def test_thread_count_setting_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(parallel.THREADS_VAR, "two")
    with pytest.raises(ConfigError, match="RLLM_KERNEL_THREADS='two'"):
        parallel.thread_count()
    monkeypatch.setenv(parallel.THREADS_VAR, "1")
    assert parallel.part_count(10 * parallel.MIN_PART) == 1


def _grpo_in_child(queue: Any) -> None:
    with threads(2):
        queue.put(rllm.compute_advantages("grpo", [1.0, 0.0, 2.0, 2.0], [0, 0, 1, 1]).tolist())


@needs_numba
@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX-only")
def test_a_forked_child_gets_its_own_threads() -> None:
    """A forked child inherits the pool object but not its threads; it must not wait on them forever."""
    with threads(2):
        rllm.compute_advantages("grpo", [1.0, 0.0, 2.0, 2.0], [0, 0, 1, 1])  # the parent's pool now exists
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_grpo_in_child, args=(queue,))
    child.start()
    child.join(timeout=60)
    assert child.exitcode == 0
    assert queue.get(timeout=5) == pytest.approx([1 / (0.5 + 1e-6) * 0.5, -0.5 / (0.5 + 1e-6), 0.0, 0.0])
