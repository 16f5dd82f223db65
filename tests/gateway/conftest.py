"""The gateway every test of this folder talks to: listening on 127.0.0.1, stopped after the test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rllm.gateway import Gateway


@pytest.fixture
def gateway() -> Iterator[Gateway]:
    running = Gateway().start()
    try:
        yield running
    finally:
        running.stop()
