"""The objects alive when training starts are out of the garbage collector's passes during the run, and the young
generation's threshold is sized for a step's objects: during the run only."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest

from rllm.errors import WorkflowError
from rllm.tasks import ArithmeticWorkflow
from rllm.types import Episode

SEEN: list[int] = []
"""``gc.get_freeze_count()`` as each episode saw it."""
THRESHOLDS: list[tuple[int, int, int]] = []
"""``gc.get_threshold()`` as each episode saw it."""


class Observing(ArithmeticWorkflow):
    async def run(self, task: dict[str, Any], uid: str, **kwargs: Any) -> Episode:
        SEEN.append(gc.get_freeze_count())
        THRESHOLDS.append(gc.get_threshold())
        return await super().run(task, uid, **kwargs)


class Failing(ArithmeticWorkflow):
    async def run(self, task: dict[str, Any], uid: str, **kwargs: Any) -> Episode:
        SEEN.append(gc.get_freeze_count())
        THRESHOLDS.append(gc.get_threshold())
        raise RuntimeError("the environment is gone")


@pytest.fixture(autouse=True)
def _unfrozen() -> Iterator[None]:
    thresholds = gc.get_threshold()
    gc.unfreeze()
    gc.set_threshold(700, 10, 10)
    SEEN.clear()
    THRESHOLDS.clear()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


def _short(make_config: Any, *overrides: str) -> Any:
    return make_config("rllm.trainer.total_batches=2", "rllm.trainer.test_freq=0", *overrides)


def test_a_run_freezes_what_was_alive_at_its_start_and_unfreezes_it_after(make_config, train) -> None:
    alive_before = len(gc.get_objects())
    train(_short(make_config), workflow_class=Observing)
    assert SEEN and min(SEEN) >= alive_before // 2  # the model, config and modules: far more than a few objects
    assert gc.get_freeze_count() == 0


def test_a_failing_run_unfreezes_too(make_config, train) -> None:
    with pytest.raises(WorkflowError, match="the environment is gone"):
        train(_short(make_config, "rllm.workflow.failure_policy=fail"), workflow_class=Failing)
    assert SEEN and SEEN[0] > 0
    assert gc.get_freeze_count() == 0
    assert set(THRESHOLDS) == {(10_000, 10, 10)}
    assert gc.get_threshold() == (700, 10, 10)


def test_objects_the_process_froze_itself_stay_frozen_and_nothing_more_is(make_config, train) -> None:
    gc.freeze()
    mine = gc.get_freeze_count()
    train(_short(make_config), workflow_class=Observing)
    # frozen objects can still be freed by their reference counts, so the count may only fall
    assert SEEN and max(SEEN) <= mine
    assert mine // 2 < gc.get_freeze_count() <= mine


def test_during_a_run_the_young_generation_waits_for_a_steps_objects_and_after_it_python_s_threshold_is_back(
    make_config, train
) -> None:
    train(_short(make_config), workflow_class=Observing)
    assert set(THRESHOLDS) == {(10_000, 10, 10)}  # CPython's 700 raised for the young generation only
    assert gc.get_threshold() == (700, 10, 10)


def test_thresholds_the_process_set_itself_are_kept(make_config, train) -> None:
    gc.set_threshold(1234, 5, 6)
    train(_short(make_config), workflow_class=Observing)
    assert set(THRESHOLDS) == {(1234, 5, 6)}
    assert gc.get_threshold() == (1234, 5, 6)
