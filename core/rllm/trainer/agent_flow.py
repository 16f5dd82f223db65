"""Training an :class:`~rllm.types.AgentFlow`: the gateway started, the flow run as a workflow, both stopped after.

:func:`flow_trainer` is what ``AgentTrainer(agent_flow=..., evaluator=...)`` and ``rllm train
rllm.agent_flow.flow=module:attr`` build: a :class:`UnifiedTrainer` whose workflow is
:class:`~rllm.workflows.agent_flow.AgentFlowWorkflow`, each episode's calls going through a
gateway (:mod:`rllm.gateway.server`) on ``rllm.gateway.host``. The config keys name the flow, the
evaluator and the datasets as ``module:attr``; :func:`load_attr` reads one, naming the key when
it does not import.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from omegaconf import DictConfig

from rllm.errors import ConfigError
from rllm.gateway import Gateway
from rllm.usercode import UserThreads
from rllm.workflows.agent_flow import AgentFlowWorkflow, check_agent_flow

__all__ = ["flow_objects", "flow_trainer", "load_attr"]


def load_attr(path: str, key: str) -> Any:
    """The object ``module:attr`` names (``attr`` may be dotted); one line naming ``key`` when it cannot be had."""
    module_name, colon, attr = str(path).partition(":")
    if not colon or not module_name or not attr:
        raise ConfigError(f"{key}={path!r} is not module:attr; write e.g. my_agents.flows:MathFlow.")
    try:
        target: Any = _import_from_here_too(module_name)
    except Exception as exc:  # the user's module: any error while importing it is theirs to see, in one line
        raise ConfigError(
            f"{key}={path!r}: module {module_name!r} does not import ({type(exc).__name__}: {exc}); check the "
            "name, and run from the directory that holds it (or put that directory on PYTHONPATH)."
        ) from None
    for part in attr.split("."):
        if not hasattr(target, part):
            raise ConfigError(f"{key}={path!r}: module {module_name!r} has no attribute {attr!r}.")
        target = getattr(target, part)
    return target


def _import_from_here_too(module_name: str) -> Any:
    """``import_module``, also finding a module in the current directory, as ``python -m`` and uvicorn do.

    The ``rllm`` console script's path starts at its own bin directory, not the current one, so
    ``rllm.agent_flow.flow=my_flows:Flow`` beside the reader would not import without this. The
    directory goes last on the path: an installed package of the same name still wins.
    """
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        here = os.getcwd()
        if exc.name != module_name.split(".")[0] or here in sys.path or "" in sys.path:
            raise
        sys.path.append(here)
        importlib.invalidate_caches()
        return importlib.import_module(module_name)


def _instance(obj: Any, key: str) -> Any:
    """A class named in the config is made with no arguments."""
    if not isinstance(obj, type):
        return obj
    try:
        return obj()
    except TypeError as exc:
        raise ConfigError(
            f"{key}: {obj.__qualname__}() needs arguments ({exc}); name an instance (module:attr) instead."
        ) from None


def _tasks(obj: Any, key: str) -> list[Any]:
    tasks = obj() if callable(obj) and not isinstance(obj, Sequence) else obj
    if isinstance(tasks, (str, bytes)) or not isinstance(tasks, Sequence) or not tasks:
        raise ConfigError(f"{key} must name a non-empty list of tasks (or a function returning one).")
    return list(tasks)


def flow_objects(config: DictConfig) -> tuple[Any, Any, list[Any] | None, list[Any] | None] | None:
    """The flow, evaluator and datasets ``rllm.agent_flow`` names (datasets None when not set); None: no flow."""
    section = config.rllm.agent_flow
    if section.flow is None:
        given = [name for name in ("evaluator", "train_dataset", "val_dataset") if section[name] is not None]
        if given:
            raise ConfigError(
                f"rllm.agent_flow.{given[0]} is set but rllm.agent_flow.flow is not; name the AgentFlow (module:attr) "
                "or remove it."
            )
        return None
    if section.evaluator is None:
        raise ConfigError(
            "rllm.agent_flow.flow is set but rllm.agent_flow.evaluator is not; name the Evaluator that scores the "
            "flow's episodes (module:attr)."
        )
    flow = _instance(load_attr(section.flow, "rllm.agent_flow.flow"), "rllm.agent_flow.flow")
    evaluator = _instance(load_attr(section.evaluator, "rllm.agent_flow.evaluator"), "rllm.agent_flow.evaluator")
    datasets = []
    for name in ("train_dataset", "val_dataset"):
        path = section[name]
        key = f"rllm.agent_flow.{name}"
        datasets.append(None if path is None else _tasks(load_attr(path, key), key))
    return flow, evaluator, datasets[0], datasets[1]


def flow_trainer(
    backend: str | None,
    config: DictConfig,
    agent_flow: Any,
    evaluator: Any,
    train_dataset: Sequence[Any] | None,
    val_dataset: Sequence[Any] | None,
    **trainer_options: Any,
) -> tuple[Any, Callable[[], None]]:
    """A trainer of ``agent_flow`` with its gateway listening, and the function that stops the gateway."""
    from rllm.trainer.unified import UnifiedTrainer

    agent_flow, evaluator = _instance(agent_flow, "agent_flow"), _instance(evaluator, "evaluator")
    check_agent_flow(agent_flow, evaluator)
    if str(config.rllm.workflow.executor) != "local":
        raise ConfigError(
            "an agent flow runs with rllm.workflow.executor=local: its calls go through the gateway in this process "
            f"(got {config.rllm.workflow.executor})."
        )
    if train_dataset is None:
        raise ConfigError(
            "an agent flow needs its tasks: pass train_dataset= (AgentTrainer) or set rllm.agent_flow.train_dataset."
        )
    settings = config.rllm.gateway
    stall = config.rllm.workflow.timeout  # an arun holding the loop longer than an episode may take is said
    gateway = Gateway(str(settings.host), int(settings.port), str(settings.model), stall).start()
    threads = UserThreads(int(settings.flow_threads), "rllm-flow")  # a flow stuck past its deadline is left behind

    def stop() -> None:
        gateway.stop()
        threads.shutdown(wait=False, cancel_futures=True)

    try:
        trainer = UnifiedTrainer(
            backend,
            config,
            workflow_class=AgentFlowWorkflow,
            train_dataset=train_dataset,
            val_dataset=val_dataset if val_dataset is not None else train_dataset,
            workflow_args={"agent_flow": agent_flow, "evaluator": evaluator, "gateway": gateway, "executor": threads},
            **trainer_options,
        )
    except BaseException:
        stop()
        raise
    return trainer, stop
