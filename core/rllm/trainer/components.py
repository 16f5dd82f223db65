"""The parts of a run its config names: the backend class, the grouping hook, the workflow executor.

Each is given directly or by the name a plugin registered; resolving them when the trainer is
built makes a misspelt name fail before the first rollout.
"""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from rllm.config.algorithm import AlgorithmConfig
from rllm.config.unhonoured import other_backend_keys
from rllm.errors import ConfigError
from rllm.plugins.hook_kinds import backend_class
from rllm.plugins.manager import get_plugin_manager
from rllm.rollouts.executors import Executor
from rllm.trainer.backend_protocol import BackendProtocol
from rllm.trainer.grouping import GroupingHook, with_options


def resolve_backend(backend_cls: type[BackendProtocol] | str | None, config: DictConfig) -> type[BackendProtocol]:
    """``backend_cls`` if it is a class, else the class registered as it (or as ``rllm.backend``), imported now if
    the plugin registered it lazily as ``"module:Class"``."""
    if isinstance(backend_cls, type):
        return backend_cls
    name = backend_cls or str(config.rllm.backend)
    return backend_class(get_plugin_manager().backends.resolve(name))


def check_backend_sections(config: DictConfig, backend: str) -> None:
    """Refuse keys set in another backend's section (``rllm.transformers.lr`` in an embedded run): they would be
    accepted and change nothing."""
    said = other_backend_keys(config, backend, get_plugin_manager().backends.names())
    if said:
        raise ConfigError(said[0])


def check_backend_fills(backend: type[BackendProtocol], algorithm: AlgorithmConfig) -> None:
    """Refuse, before anything is built, an estimator needing a per-token field the backend does not fill.

    The fields only a training backend can fill (``old_log_probs``, ``sum_pi_squared``, ...) are
    those it lists in ``batch_fields``; the message names the estimator, the field and the backend.
    """
    from rllm.contract.fields import BACKEND_FIELDS
    from rllm.estimators.compute import get_estimator

    fills = frozenset(getattr(backend, "batch_fields", ()))
    names = [algorithm.estimator, *algorithm.estimator_map.values()]
    for name in dict.fromkeys(str(getattr(n, "value", n)) for n in names):
        for needed in get_estimator(name).requires:
            if needed in BACKEND_FIELDS and needed not in fills:
                offered = ", ".join(sorted(fills)) or "none"
                raise ConfigError(
                    f"Estimator {name!r} needs the per-token field {needed!r}, which the backend "
                    f"{backend.__name__} does not fill (it fills: {offered}); choose a backend that does "
                    "(rllm.backend=transformers fills them all) or another estimator."
                )


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
    from rllm.rollouts.ray_executor import RayExecutor  # ray is an optional extra: imported only when chosen

    return RayExecutor.from_config(workflow.ray)
