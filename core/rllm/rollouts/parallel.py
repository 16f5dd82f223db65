"""Data-parallel training: the processes of one run, as the trainer and the workflow engine see them.

A backend that trains in several processes (the transformers backend under ``torchrun``)
returns a :class:`ProcessGroup` from :attr:`~rllm.trainer.backend_protocol.BackendProtocol.process_group`.
The trainer then runs in every process on the same data: each process rolls out its share of
a batch's tasks (whole groups, seeded as in one process), the episodes are gathered so that
grouping, filtering and advantages see the whole batch everywhere, and only rank 0 writes the
run directory (metrics, plots, episode files, checkpoints) while the others wait for it.
Nothing here imports a distributed library: the backend supplies the collectives.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["ProcessGroup", "merge_counts", "share_of"]


@dataclass(frozen=True)
class ProcessGroup:
    """This process's place in a data-parallel run and the two collectives the trainer needs.

    ``gather(value)`` takes a JSON-able value from every process and returns them in rank
    order (JSON, never pickle, crosses the wire); ``barrier()`` returns once every process
    reached it.
    """

    rank: int
    world_size: int
    gather: Callable[[Any], list[Any]]
    barrier: Callable[[], None]

    @property
    def writes(self) -> bool:
        """Whether this process writes the run directory (rank 0 alone)."""
        return self.rank == 0


def share_of(count: int, rank: int, world_size: int) -> range:
    """The positions of ``count`` items that process ``rank`` of ``world_size`` takes: contiguous, sizes differing
    by one at most (the first ``count % world_size`` processes take one more)."""
    base, extra = divmod(count, world_size)
    start = rank * base + min(rank, extra)
    return range(start, start + base + (rank < extra))


def merge_counts(parts: Sequence[dict[str, int]]) -> dict[str, int]:
    """Counters from every process, summed key by key."""
    total: dict[str, int] = {}
    for part in parts:
        for key, value in part.items():
            total[key] = total.get(key, 0) + int(value)
    return total
