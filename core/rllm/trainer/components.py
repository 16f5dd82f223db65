"""The parts of a run its config names: the backend class, the grouping hook, the workflow executor.

Each is given directly or by the name a plugin registered; resolving them when the trainer is
built makes a misspelt name fail before the first rollout.
"""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from rllm.plugins.contract import backend_class
from rllm.plugins.manager import get_plugin_manager
from rllm.trainer.backend_protocol import BackendProtocol
from rllm.trainer.engine import Executor
from rllm.trainer.grouping import GroupingHook, with_options


def resolve_backend(backend_cls: type[BackendProtocol] | str | None, config: DictConfig) -> type[BackendProtocol]:
    """``backend_cls`` if it is a class, else the class registered as it (or as ``rllm.backend``), imported now if
    the plugin registered it lazily as ``"module:Class"``."""
    if isinstance(backend_cls, type):
        return backend_cls
    name = backend_cls or str(config.rllm.backend)
    return backend_class(get_plugin_manager().backends.resolve(name))


def resolve_grouping_hook(hook: GroupingHook | str | None, config: DictConfig) -> GroupingHook:
    """The hook to call as ``hook(episodes)``, with ``rllm.grouping_hook_options`` bound."""
    options = OmegaConf.to_container(config.rllm.grouping_hook_options, resolve=True)
    if callable(hook):
        return with_options(hook, options, getattr(hook, "__qualname__", repr(hook)))  # type: ignore[arg-type]
    name = hook or str(config.rllm.grouping_hook)
    return with_options(get_plugin_manager().grouping_hooks.resolve(name).target, options, name)  # type: ignore[arg-type]


def configured_executor(workflow: DictConfig) -> Executor | None:
    """The executor ``rllm.workflow.executor`` names; None is the engine's local one."""
    if str(workflow.executor) != "ray":
        return None
    from rllm.trainer.ray_executor import RayExecutor  # ray is an optional extra: imported only when chosen

    return RayExecutor.from_config(workflow.ray)
