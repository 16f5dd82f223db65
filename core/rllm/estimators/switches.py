"""Flip an environment switch of the kernels for the span of a block (benchmarks, tests)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def override(name: str, value: str) -> Iterator[None]:
    """Set environment variable ``name`` to ``value`` inside the block, then restore it (or its absence)."""
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before
