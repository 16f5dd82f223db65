"""The old path of :mod:`rllm.plugins.hook_kinds` (the kinds of registration hook and their checks).

Renamed so as not to read as :mod:`rllm.contract`, the declarations floor; import from ``rllm.plugins.hook_kinds``.
"""

from __future__ import annotations

from rllm.plugins.hook_kinds import (
    CONFIG_SECTIONS,
    HOOK_KIND,
    HOOK_KINDS,
    PROTOCOL_CLASS,
    PROTOCOL_MODULE,
    TRACKER_METHOD,
    HookKind,
    backend_class,
    backend_problem,
    callable_problem,
    config_section_problem,
    kernel_problem,
    tracker_class,
    tracker_problem,
    weight_sync_class,
    weight_sync_problem,
)

__all__ = [
    "CONFIG_SECTIONS",
    "HOOK_KIND",
    "HOOK_KINDS",
    "PROTOCOL_CLASS",
    "PROTOCOL_MODULE",
    "TRACKER_METHOD",
    "HookKind",
    "backend_class",
    "backend_problem",
    "callable_problem",
    "config_section_problem",
    "kernel_problem",
    "tracker_class",
    "tracker_problem",
    "weight_sync_class",
    "weight_sync_problem",
]
