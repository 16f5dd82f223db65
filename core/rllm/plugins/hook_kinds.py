"""The kinds of registration hook: what each one fills, and the checks an object must pass to be registered.

The checks run when a plugin registers, so a wrong object is refused naming the plugin
instead of failing later inside a training run. They look only at the object itself (no
trainer, omegaconf or backend module is imported to check a backend).
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rllm.contract.keys import ConfigKey
from rllm.contract.names import BACKEND_ABSTRACT_METHODS, BACKEND_METHODS, KERNEL_NAMES
from rllm.errors import (
    BackendConflictError,
    BackendNotFoundError,
    BatchFieldConflictError,
    BatchFieldNotFoundError,
    EstimatorConflictError,
    EstimatorNotFoundError,
    GroupingHookConflictError,
    GroupingHookNotFoundError,
    KernelConflictError,
    KernelNotFoundError,
    LossConflictError,
    LossNotFoundError,
    NameConflictError,
    NameNotFoundError,
    PluginContractError,
    TrackerConflictError,
    TrackerNotFoundError,
    WeightSyncConflictError,
    WeightSyncNotFoundError,
)
from rllm.plugins.fields import batch_field_problem
from rllm.plugins.registry import Entry, import_target, is_import_path

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

PROTOCOL_MODULE, PROTOCOL_CLASS = "rllm.trainer.backend_protocol", "BackendProtocol"


def callable_problem(name: str, target: Any) -> str | None:
    """Why ``target`` cannot be a grouping hook: it must be callable."""
    return None if callable(target) else f"is {target!r}, which is not callable"


def kernel_problem(name: str, target: Any) -> str | None:
    """Why ``target`` cannot be the kernel ``name``: an unknown name is never called, and it must be callable."""
    if name not in KERNEL_NAMES:
        close = difflib.get_close_matches(name, KERNEL_NAMES, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return f"is not a kernel rllm uses{hint}; kernel names: {', '.join(KERNEL_NAMES)}"
    return callable_problem(name, target)


def config_section_problem(name: str, target: Any) -> str | None:
    """Why ``target`` (the keys, or None) cannot be declared as config section ``name``, or None."""
    if name.startswith(".") or name.endswith(".") or ".." in name:
        return "is not a dotted section name such as 'rllm.my_backend'"
    if target is None:
        return None
    for key in target:
        if not isinstance(key, ConfigKey):
            return f"declares {key!r}, which is not a rllm.config.ConfigKey"
        if not isinstance(key.type, str):
            words = "int, float, bool, str, list[str], list[int] or mapping"
            return f"declares key {key.name!r} with Python types {key.type!r}; a config key's type is a word: {words}"
    return None


def _is_protocol_base(owner: type) -> bool:
    return owner.__module__ == PROTOCOL_MODULE and owner.__qualname__ == PROTOCOL_CLASS


def backend_problem(name: str, target: Any) -> str | None:
    """Why ``target`` does not implement the backend protocol, or None when it does.

    A ``"module:Class"`` path passes if it is one: it is imported, and the class checked, when
    a run first asks for the backend (:func:`backend_class`), so registering imports nothing.
    """
    if isinstance(target, str) and is_import_path(target):
        return None
    if not isinstance(target, type):
        return f"is {target!r}, not a class (register the backend class, or its 'module:Class' path)"
    problems = []
    for method, is_async in BACKEND_METHODS.items():
        owner = next((k for k in target.__mro__ if method in vars(k)), None)
        function = getattr(target, method, None)
        if owner is None or not callable(function):
            problems.append(f"has no method {method}()")
        elif method in BACKEND_ABSTRACT_METHODS and _is_protocol_base(owner):
            problems.append(f"does not override {method}()")
        elif is_async != inspect.iscoroutinefunction(function):
            problems.append(f"{method}() must {'' if is_async else 'not '}be async def")
    try:
        parameters = inspect.signature(target).parameters.values()
    except (TypeError, ValueError):  # a class whose signature Python cannot read is given the benefit of the doubt
        parameters = None
    open_keywords = parameters is None or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)
    if not open_keywords and not {"config", "algorithm"} <= {p.name for p in parameters}:  # type: ignore[union-attr]
        problems.append("cannot be constructed as backend_cls(config=..., algorithm=...)")
    if not problems:
        return None
    return (
        f"does not implement rllm.trainer.backend_protocol.BackendProtocol: it {', '.join(problems)} "
        "(subclass BackendProtocol, or the embedded backend, and override its stages)"
    )


def _loaded_class(entry: Entry, what: str, problem: Callable[[str, Any], str | None]) -> type[Any]:
    """The class of a claim: a lazy ``"module:Class"`` is imported now and checked by ``problem`` as a class
    registered directly is at registration, so a wrong path or class is one line naming ``what`` and the plugin."""
    if not isinstance(entry.target, str):
        return entry.target  # type: ignore[no-any-return]
    who = f"{what} {entry.name!r} of {entry.source.describe()}"
    target = import_target(entry.target, who, "Install what the plugin needs, or fix its registration.")
    found = problem(entry.name, target)
    if found:
        raise PluginContractError(f"{who}, loaded from {entry.target!r}, {found}.")
    return target  # type: ignore[no-any-return]


def backend_class(entry: Entry) -> type[Any]:
    """The class of a backend claim: a lazy ``"module:Class"`` is imported now and checked as a class registered
    directly is at registration, so a wrong path or class is one line naming the plugin."""
    return _loaded_class(entry, "Backend", backend_problem)


def weight_sync_problem(name: str, target: Any) -> str | None:
    """Why ``target`` cannot be a weight sync: a class with ``push``, or its ``"module:Class"`` path (checked when
    a run selects it, :func:`weight_sync_class`)."""
    if isinstance(target, str) and is_import_path(target):
        return None
    if not isinstance(target, type):
        return f"is {target!r}, not a class (register the weight-sync class, or its 'module:Class' path)"
    if not callable(getattr(target, "push", None)):
        return "has no method push(update) (subclass rllm.engine.weight_sync.WeightSync)"
    return None


def weight_sync_class(entry: Entry) -> type[Any]:
    """The class of a weight-sync claim, a lazy path imported and checked now, as :func:`backend_class` does."""
    return _loaded_class(entry, "Weight sync", weight_sync_problem)


TRACKER_METHOD = "log_metrics"
"""The one method a tracker class must define; :class:`rllm.trainer.Tracker` gives the others a default."""


def tracker_problem(name: str, target: Any) -> str | None:
    """Why ``target`` cannot be a tracker: a class (or its ``"module:Class"`` path) with ``log_metrics``."""
    if isinstance(target, str) and is_import_path(target):
        return None
    if not isinstance(target, type):
        return f"is {target!r}, not a class (register the tracker class, or its 'module:Class' path)"
    if not callable(getattr(target, TRACKER_METHOD, None)):
        return f"has no method {TRACKER_METHOD}() (subclass rllm.trainer.Tracker)"
    return None


def tracker_class(entry: Entry) -> type[Any]:
    """The class of a tracker claim: a lazy ``"module:Class"`` is imported now and checked like a class."""
    return _loaded_class(entry, "Tracker", tracker_problem)


@dataclass(frozen=True)
class HookKind:
    """One registration hook: the manager's registry it fills and how a registered object is checked.

    ``attribute`` names both the registry on the manager and the list on ``PluginInfo``.
    ``problem`` is None for estimators and losses, whose declarations are checked by
    ``EstimatorEntry`` and ``LossEntry``.
    """

    hook: str
    attribute: str
    what: str
    not_found: type[NameNotFoundError]
    conflict: type[NameConflictError]
    problem: Callable[[str, Any], str | None] | None = None


HOOK_KINDS = (
    HookKind("rllm_register_estimators", "estimators", "estimator", EstimatorNotFoundError, EstimatorConflictError),
    HookKind(
        "rllm_register_grouping_hooks",
        "grouping_hooks",
        "grouping hook",
        GroupingHookNotFoundError,
        GroupingHookConflictError,
        callable_problem,
    ),
    HookKind(
        "rllm_register_backends", "backends", "backend", BackendNotFoundError, BackendConflictError, backend_problem
    ),
    HookKind("rllm_register_kernels", "kernels", "kernel", KernelNotFoundError, KernelConflictError, kernel_problem),
    HookKind(
        "rllm_register_batch_fields",
        "batch_fields",
        "batch field",
        BatchFieldNotFoundError,
        BatchFieldConflictError,
        batch_field_problem,
    ),
    HookKind("rllm_register_losses", "losses", "loss", LossNotFoundError, LossConflictError),
    HookKind(
        "rllm_register_trackers", "trackers", "tracker", TrackerNotFoundError, TrackerConflictError, tracker_problem
    ),
    HookKind(
        "rllm_register_config_sections",
        "config_sections",
        "config section",
        NameNotFoundError,
        NameConflictError,
        config_section_problem,
    ),
    HookKind(
        "rllm_register_weight_syncs",
        "weight_syncs",
        "weight sync",
        WeightSyncNotFoundError,
        WeightSyncConflictError,
        weight_sync_problem,
    ),
)
"""Every registration hook, in the order a plugin's hooks run."""
HOOK_KIND: dict[str, HookKind] = {kind.attribute: kind for kind in HOOK_KINDS}
"""Each hook kind by the name of the registry it fills (``HOOK_KIND["kernels"]``), never by its position."""
CONFIG_SECTIONS = HOOK_KIND["config_sections"]
"""Its registrar takes ``(section, keys=None)``: the keys (a tuple, or None for an open section) are the target."""
