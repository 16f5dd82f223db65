"""The run's long-lived objects, kept out of the garbage collector's full passes while it trains."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def long_lived_objects_frozen() -> Iterator[None]:
    """Freeze every object alive now for the block (``gc.freeze``), and unfreeze them after it.

    What is alive when the steps start (the model and its optimizer, the config, the datasets,
    the imported modules) lives until the run ends, while each step allocates thousands of short
    objects (episodes, steps, event-loop tasks), so the cyclic collector's full pass comes round
    every few steps and each one walks all the long-lived objects again, for nothing. Frozen,
    they are skipped. A process that froze objects of its own already is left as it is.

    Only the young generations are collected before the freeze: the full pass walked every live
    object once more (0.2 s with the tiny model, about as long as 8 steps of the digit race) to
    free what was a few thousand setup objects (config nodes, closures). Older garbage stays frozen
    until the run ends, and is then collected as usual.
    """
    if gc.get_freeze_count():
        yield
        return
    gc.collect(1)
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
