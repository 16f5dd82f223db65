"""Workflows turn a task into an episode; see :class:`rllm.workflows.workflow.Workflow`."""

from rllm.workflows.timing_mixin import TimingTrackingMixin
from rllm.workflows.workflow import TerminationEvent, TerminationReason, Workflow

__all__ = ["TerminationEvent", "TerminationReason", "TimingTrackingMixin", "Workflow"]
