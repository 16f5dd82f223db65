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
    """Train ``workflow_class`` on the datasets with the named backend: ``AgentTrainer(...).train()``.

    ``config`` is a DictConfig, a mapping (nested, or rLLM's dotted keys) or a list of overrides
    as ``rllm train`` takes them; ``backend`` is any registered backend name (None:
    ``rllm.backend``). A workflow or dataset left out comes from the backend's built-in task.
    rLLM's agent/environment arguments are refused by name: wrap the agent in a workflow.
    """

    def __init__(
        self,
        workflow_class: type | None = None,
        workflow_args: dict[str, Any] | None = None,
        config: DictConfig | Mapping[str, Any] | Sequence[str] | None = None,
        train_dataset: Sequence[Any] | None = None,
        val_dataset: Sequence[Any] | None = None,
        backend: str | None = None,
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
                "config, train_dataset, val_dataset and backend."
            )
        self.config = _load(config)
        self.backend = backend
        self.workflow_class = workflow_class
        self.workflow_args = workflow_args
        self.train_dataset = train_dataset
        self.val_dataset = val_dataset

    def train(self) -> None:
        """Run the training to the end (resuming from the run directory's checkpoint, if any)."""
        from rllm.trainer.unified import UnifiedTrainer

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
