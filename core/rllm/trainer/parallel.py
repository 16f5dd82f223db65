"""Moved to :mod:`rllm.rollouts.parallel`; this path keeps working."""

from rllm.rollouts.parallel import ProcessGroup, merge_counts, share_of

__all__ = ["ProcessGroup", "merge_counts", "share_of"]
