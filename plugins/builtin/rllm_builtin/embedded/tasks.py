"""The built-in tasks' earlier path: they live in :mod:`rllm.tasks`, shared by every backend."""

from __future__ import annotations

from typing import Any

import rllm.tasks

__all__ = rllm.tasks.__all__


def __getattr__(name: str) -> Any:
    """Every public name of :mod:`rllm.tasks`, the same object (``from rllm_builtin.embedded.tasks import VOCAB``)."""
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(rllm.tasks, name)
