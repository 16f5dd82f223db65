"""pluggy's markers of rllm's hooks: ``@rllm.hookimpl`` on a plugin's functions, ``@hookspec`` on rllm's specs."""

from __future__ import annotations

import pluggy

__all__ = ["PROJECT_NAME", "hookimpl", "hookspec"]

PROJECT_NAME = "rllm"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)
