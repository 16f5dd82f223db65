"""The ``fast`` plugin's hook: registers the compiled primitives when numba is installed.

Loading the plugin only asks whether numba can be found; numba is imported, and the loops
compiled, on the first call of a primitive (:mod:`rllm_fast.primitives`).
"""

from __future__ import annotations

import importlib.util

import rllm
from rllm.plugins import KernelRegistrar
from rllm_fast.primitives import FastPrimitives

PRIMITIVES = FastPrimitives()
"""The one set of primitives the plugin registers (it owns the compiled loops and the thread pool)."""


@rllm.hookimpl
def rllm_register_kernels(register: KernelRegistrar) -> None:
    if importlib.util.find_spec("numba") is None:  # without numba the toolkit's numpy path is the only one
        return
    register("group_centre", PRIMITIVES.group_centre)
    register("sorted_runs", PRIMITIVES.sorted_runs)
    register("run_starts", PRIMITIVES.run_starts)
