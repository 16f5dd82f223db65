"""Workflow types at the reference's ``rllm.workflows.workflow`` path."""

from rllm.types import TerminationReason

__all__ = ["TerminationReason"]
