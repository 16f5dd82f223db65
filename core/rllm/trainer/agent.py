"""rLLM's entry point, ``AgentTrainer(...).train()``, over :class:`UnifiedTrainer` and any registered backend."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from omegaconf import DictConfig

from rllm.errors import ConfigError

_UNSUPPORTED = ("agent_class", "env_class", "agent_args", "env_args", "agent_run_func")
"""rLLM's agent/environment arguments: this trainer runs workflows only."""


def _load(config: DictConfig | Mapping[str, Any] | Sequence[str] | None) -> DictConfig:
    from rllm.config import load_config

    if config is None:
        return load_config()
    if isinstance(config, DictConfig | Mapping):
        return load_config(config)  # rLLM's dotted keys ("rllm.data.train_batch_size") are nested there
    if isinstance(config, str) or not all(isinstance(item, str) for item in config):
        raise ConfigError(
            "AgentTrainer config must be a mapping, a DictConfig or a list of 'key=value' override strings; "
            f"got {type(config).__name__}."
        )
    return load_config(overrides=list(config))


class AgentTrainer:
    """Train ``workflow_class``, or ``agent_flow`` scored by ``evaluator``, with the named backend.

    ``config`` is a DictConfig, a mapping (nested, or rLLM's dotted keys) or a list of overrides
    as ``rllm train`` takes them; ``backend`` is any registered backend name (None:
    ``rllm.backend``). A workflow or dataset left out comes from the backend's built-in task.
    An :class:`~rllm.types.AgentFlow` (instance, or class made with no arguments) calls the
    policy through its episode's gateway URL (``rllm.gateway.*``); it needs ``evaluator`` and
    ``train_dataset`` (``val_dataset`` defaults to it). rLLM's agent/environment arguments are
    refused by name: wrap the agent in a workflow or an agent flow.
    """

    def __init__(
        self,
        workflow_class: type | None = None,
        workflow_args: dict[str, Any] | None = None,
        config: DictConfig | Mapping[str, Any] | Sequence[str] | None = None,
        train_dataset: Sequence[Any] | None = None,
        val_dataset: Sequence[Any] | None = None,
        backend: str | None = None,
        agent_flow: Any = None,
        evaluator: Any = None,
        **kwargs: Any,
    ) -> None:
        given = [name for name in _UNSUPPORTED if kwargs.get(name) is not None]
        if given:
            raise ConfigError(
                f"AgentTrainer({given[0]}=...) is not supported: this trainer runs workflows; wrap the agent and "
                "environment in a Workflow subclass and pass it as workflow_class."
            )
        unknown = sorted(set(kwargs) - set(_UNSUPPORTED))
        if unknown:
            raise ConfigError(
                f"AgentTrainer got unknown keyword argument(s) {unknown}; it takes workflow_class, workflow_args, "
                "config, train_dataset, val_dataset, backend, agent_flow and evaluator."
            )
        if agent_flow is None and evaluator is not None:
            raise ConfigError("AgentTrainer got evaluator= without agent_flow=; the evaluator scores an agent flow.")
        if agent_flow is not None:
            if workflow_class is not None or workflow_args is not None:
                raise ConfigError("AgentTrainer takes agent_flow= or workflow_class=, not both.")
            if evaluator is None:
                raise ConfigError(
                    "AgentTrainer(agent_flow=...) needs evaluator=: an Evaluator whose evaluate(task, episode) "
                    "returns the EvalOutput the flow is trained on."
                )
        self.config = _load(config)
        self.backend = backend
        self.workflow_class = workflow_class
        self.workflow_args = workflow_args
        self.train_dataset = train_dataset
        self.val_dataset = val_dataset
        self.agent_flow, self.evaluator = agent_flow, evaluator

    def train(self) -> None:
        """Run the training to the end (resuming from the run directory's checkpoint, if any)."""
        from rllm.trainer.agent_flow import flow_objects, flow_trainer
        from rllm.trainer.unified import UnifiedTrainer

        named = flow_objects(self.config)
        if named is not None and self.agent_flow is None and self.workflow_class is None:
            self.agent_flow, self.evaluator = named[0], named[1]
            self.train_dataset = self.train_dataset if self.train_dataset is not None else named[2]
            self.val_dataset = self.val_dataset if self.val_dataset is not None else named[3]
        elif named is not None:
            raise ConfigError(
                "AgentTrainer got a workflow or agent flow and rllm.agent_flow.flow names another; give one of them."
            )
        if self.agent_flow is not None:
            trainer, stop = flow_trainer(
                self.backend, self.config, self.agent_flow, self.evaluator, self.train_dataset, self.val_dataset
            )
            try:
                trainer.fit()
            finally:
                trainer.shutdown()
                stop()
            return
        trainer = UnifiedTrainer(
            self.backend,
            self.config,
            workflow_class=self.workflow_class,
            train_dataset=self.train_dataset,
            val_dataset=self.val_dataset,
            workflow_args=self.workflow_args,
        )
        try:
            trainer.fit()
        finally:
            trainer.shutdown()
