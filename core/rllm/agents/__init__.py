"""rLLM's ``rllm.agents`` path: :class:`BaseAgent` and the data model it fills."""

from rllm.agents.agent import BaseAgent
from rllm.types import Action, Episode, Step, Trajectory

__all__ = ["Action", "BaseAgent", "Episode", "Step", "Trajectory"]
