"""From episodes to trajectory groups at rLLM's current path."""

from rllm.config.stages import TransformConfig
from rllm.trainer.grouping import transform_episodes_to_trajectory_groups

__all__ = ["TransformConfig", "transform_episodes_to_trajectory_groups"]
