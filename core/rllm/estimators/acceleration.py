"""Faster implementations of toolkit primitives, supplied by plugins through ``rllm_register_kernels``.

The toolkit's numpy code is complete on its own. A plugin (such as ``rllm_fast``, the
``rllm[fast]`` extra) may register a compiled version of a primitive under one of the names
below; the toolkit then calls it and falls back to numpy when it returns None. Each primitive
must give the numpy path's results up to summation order.

``"group_centre"``: ``fn(xs, layout, mode, numerics) -> array | None``
    A fresh array of ``xs`` minus its group mean, then scaled per group by ``mode``
    (:data:`CENTRE`: not scaled; :data:`DIVIDE_BY_STD`: ``1 / (std + eps)``;
    :data:`RLOO_FACTOR`: ``n / (n - 1)``), honouring ``numerics.single`` ("raw"/"zero"),
    ``numerics.zero_variance``, ``numerics.ddof`` and ``numerics.eps``. Called only for
    contiguous layouts (``layout.codes is None``); it may locate unlocated runs
    (``layout.unlocated_runs``, then ``layout.locate_runs(starts)``).
``"sorted_runs"``: ``fn(labels) -> int | None``
    For int64 C-contiguous ``labels``: how many runs of equal labels there are, or None if
    the labels ever decrease.
``"run_starts"``: ``fn(labels, count) -> array``
    Where each of the ``count`` runs of sorted ``labels`` begins.

A door (:mod:`rllm.estimators.resolution`) looks the kernels up once per call as one
:class:`~rllm.estimators.acceleration.Kernels` value and hands it to the batch's
:class:`~rllm.estimators.layout.GroupLayout`;
the toolkit's operations take them from there and never ask the registry themselves.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rllm.contract.names import KERNEL_NAMES

if TYPE_CHECKING:
    from rllm.plugins.registry import Registry

PRIMITIVES = KERNEL_NAMES
"""The names a kernel plugin may register (the contract's one tuple)."""
GROUP_CENTRE, SORTED_RUNS, RUN_STARTS = PRIMITIVES

CENTRE, DIVIDE_BY_STD, RLOO_FACTOR = 0, 1, 2
"""What ``group_centre`` does after subtracting the group mean."""

_enabled: ContextVar[bool] = ContextVar("rllm_kernels_enabled", default=True)


def kernel(name: str) -> Callable[..., Any] | None:
    """The registered implementation of primitive ``name``, or None (use numpy)."""
    if not _enabled.get():
        return None
    from rllm.plugins.manager import get_plugin_manager

    registry = get_plugin_manager().kernels
    if name not in registry:
        return None
    return registry.resolve(name).target  # type: ignore[no-any-return]


@dataclass(frozen=True)
class Kernels:
    """The registered implementations of the primitives, looked up once (None: the numpy path).

    :meth:`get` honours :func:`numpy_only` when a kernel is used, not when it was looked up,
    so a batch built outside the block still takes the numpy path inside it.
    """

    group_centre: Callable[..., Any] | None = None
    sorted_runs: Callable[..., Any] | None = None
    run_starts: Callable[..., Any] | None = None

    def get(self, name: str) -> Callable[..., Any] | None:
        """The implementation of primitive ``name`` (one of :data:`PRIMITIVES`), or None: use numpy."""
        if not _enabled.get():
            return None
        return getattr(self, name)  # type: ignore[no-any-return]


NO_KERNELS = Kernels()
"""No compiled kernels: every primitive takes the numpy path."""


def kernels_of(registry: Registry[Any]) -> Kernels:
    """The kernels ``registry`` (a plugin manager's ``kernels``) holds, resolved now."""
    return Kernels(**{name: registry.resolve(name).target for name in PRIMITIVES if name in registry})


def installed_kernels() -> Kernels:
    """The installed plugins' kernels, asked of the plugin manager now (for a layout built without a door)."""
    from rllm.plugins.manager import get_plugin_manager

    return kernels_of(get_plugin_manager().kernels)


@contextmanager
def numpy_only() -> Iterator[None]:
    """Use the numpy path inside the block, whatever kernels are registered (comparisons, benchmarks)."""
    token = _enabled.set(False)
    try:
        yield
    finally:
        _enabled.reset(token)
