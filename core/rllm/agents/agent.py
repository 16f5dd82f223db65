"""Data-model classes at their documented ``rllm.agents.agent`` path."""

from rllm.types import Episode, Step, Trajectory, TrajectoryGroup

__all__ = ["Episode", "Step", "Trajectory", "TrajectoryGroup"]
