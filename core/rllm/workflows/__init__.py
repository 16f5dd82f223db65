"""Workflows turn a task into an episode; see :class:`rllm.workflows.workflow.Workflow`."""

from rllm.workflows.workflow import TerminationReason, Workflow

__all__ = ["TerminationReason", "Workflow"]
