"""Each rank's JSON line for a torchrun test script, printed one rank at a time (two ranks' lines written at once can
interleave in torchrun's shared stdout)."""

from __future__ import annotations

import json
from typing import Any


def say_in_rank_order(group: Any, prefix: str, record: dict[str, Any]) -> None:
    """``prefix`` and ``record`` as JSON on one line, rank 0's first (every rank calls it: it waits at barriers)."""
    for rank in range(group.world_size):
        if rank == group.rank:
            print(f"{prefix} {json.dumps(record)}", flush=True)
        group.barrier()
