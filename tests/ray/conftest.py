"""The Ray tests run against a real local Ray instance (Ray 2.60 has no local mode); without ray they skip."""

from __future__ import annotations

import builtins
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="module", autouse=True)
def _keep_builtin_print() -> Iterator[None]:
    """Ray swaps builtins.print for its tqdm-aware one on reporting a dead worker; later tests need the real one.

    Set up before each module's Ray instance, so it is restored after that instance is shut down.
    """
    original = builtins.print
    yield
    builtins.print = original
