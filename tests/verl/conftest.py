"""The verl bridge's tests run only where verl is installed (``pip install 'rllm[verl]'``; CI installs it)."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest


def _verl_missing() -> bool:
    """Whether verl is not installed. With ``tests/`` on sys.path this directory itself looks like a
    namespace package ``verl`` (no ``__init__.py``, no origin), which is not verl."""
    spec = importlib.util.find_spec("verl")
    return spec is None or spec.origin is None


VERL_MISSING = _verl_missing()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    skip = pytest.mark.skip(reason="verl is not installed here: pip install torch==2.13.0 'rllm[verl]' (CI does)")
    for item in items:
        if VERL_MISSING and "tests/verl/" in item.nodeid.replace("\\", "/"):
            item.add_marker(skip)


@pytest.fixture
def padded_batch() -> Callable[..., dict[str, Any]]:
    """verl-shaped inputs: right-padded token rewards of different lengths, string uids in shuffled groups.

    Each response's reward is split over its tokens (so the sum matters) and the padding holds
    NaN and inf, junk that must not make a response unscorable (``NaN * 0`` is NaN).
    """

    def make(n_groups: int = 6, seed: int = 0, dtype: str = "float32") -> dict[str, Any]:
        import torch

        rng = np.random.default_rng(seed)
        sizes = rng.integers(2, 7, size=n_groups)
        uids = np.array([f"prompt-{g}" for g, k in enumerate(sizes) for _ in range(k)], dtype=object)
        order = rng.permutation(len(uids))
        uids = uids[order]
        n = len(uids)
        lengths = rng.integers(1, 9, size=n)
        width = int(lengths.max()) + 2
        mask = np.arange(width)[None, :] < lengths[:, None]
        junk = np.where(rng.random((n, width)) < 0.5, np.nan, np.inf)
        token_rewards = np.where(mask, rng.random(size=(n, width)), junk)
        torch_dtype = getattr(torch, dtype)
        return {
            "uids": uids,
            "lengths": lengths,
            "scores": np.where(mask, token_rewards, 0.0).sum(axis=1),
            "mask": mask,
            "token_level_rewards": torch.tensor(token_rewards, dtype=torch_dtype),
            "response_mask": torch.tensor(mask, dtype=torch.int64),
        }

    return make


def pytest_configure(config: pytest.Config) -> None:
    # verl announces the training engines it cannot load (none is needed for advantages).
    config.addinivalue_line("filterwarnings", "ignore:.*engine is not available:UserWarning")
    config.addinivalue_line("filterwarnings", "ignore:Ray state API is no longer experimental:DeprecationWarning")


@pytest.fixture(autouse=True)
def fresh_estimator_states() -> None:
    """Stateful estimators run by verl keep their state in the process: each test starts without any."""
    if not VERL_MISSING:
        from rllm_verl import ESTIMATOR_STATES

        ESTIMATOR_STATES.load_state_dict({})
