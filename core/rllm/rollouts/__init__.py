"""The rollout side: what samples episodes for the trainer, and the channel the policy's weights come back through.

The workflow engine runs a batch's tasks through a workflow on an executor (in-process or Ray
actors), each process of a data-parallel run taking its share; the episode log keeps every
episode; the batch source yields the trainer's sampled batches up to ``lead`` steps ahead; and
:class:`PolicyVersions` owns the policy version and carries each version's weights to where
rollouts sample. Nothing here imports the trainer.
"""

from rllm.rollouts.batch_source import BatchSource, SampledBatch
from rllm.rollouts.episode_log import EpisodeLogger
from rllm.rollouts.executors import Executor, LocalExecutor, WorkflowCall, episode_seed, instantiate
from rllm.rollouts.parallel import ProcessGroup, share_of
from rllm.rollouts.policy import PolicyVersions, RolloutWeights, lag_metrics
from rllm.rollouts.workflow_engine import EngineStats, WorkflowEngine

__all__ = [
    "BatchSource",
    "EngineStats",
    "EpisodeLogger",
    "Executor",
    "LocalExecutor",
    "PolicyVersions",
    "ProcessGroup",
    "RolloutWeights",
    "SampledBatch",
    "WorkflowCall",
    "WorkflowEngine",
    "episode_seed",
    "instantiate",
    "lag_metrics",
    "share_of",
]
