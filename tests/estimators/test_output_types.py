"""What an estimator hands back reaches the caller as a writable float array of its own."""

from __future__ import annotations

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
    try:
        rewards.setflags(write=True)
    except ValueError:
        pass
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
