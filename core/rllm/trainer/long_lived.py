"""The garbage collector while a run trains: the long-lived objects frozen out of its passes, its young
generation sized for a step."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

DEFAULT_THRESHOLDS = (700, 10, 10)
"""CPython's collection thresholds; a process that set others keeps them."""

STEP_YOUNG_THRESHOLD = 10_000
"""The young generation's threshold during a run: above the objects a step keeps alive at once."""


@contextmanager
def collector_for_training() -> Iterator[None]:
    """For the block, freeze every object alive now (``gc.freeze``) and raise the young threshold; then undo both.

    What is alive when the steps start (the model and its optimizer, the config, the datasets,
    the imported modules) lives until the run ends, while each step allocates thousands of short
    objects (episodes, steps, event-loop tasks), so the cyclic collector's full pass comes round
    every few steps and each one walks all the long-lived objects again, for nothing. Frozen,
    they are skipped. Only the young generations are collected before the freeze: a full pass
    (0.2 s with the tiny model) would free only a few thousand setup objects.

    A step's episodes, tasks and futures are alive together until it ends (a few thousand with
    128 rollouts): at the threshold of 700 the collector ran five times a step, found them alive
    and walked them again one generation up, while their reference counts free them when the step
    is over. Cyclic garbage is still collected, after more allocations. A process that froze
    objects or set thresholds itself is left as it is.
    """
    thresholds = gc.get_threshold()
    tune = thresholds == DEFAULT_THRESHOLDS
    freeze = not gc.get_freeze_count()
    if freeze:
        gc.collect(1)
        gc.freeze()
    if tune:
        gc.set_threshold(STEP_YOUNG_THRESHOLD, *thresholds[1:])
    try:
        yield
    finally:
        if tune:
            gc.set_threshold(*thresholds)
        if freeze:
            gc.unfreeze()
