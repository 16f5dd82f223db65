"""rllm's ``fast`` plugin: compiled (numba) versions of the toolkit's group primitives.

Installed with rllm; active when numba is (``pip install 'rllm[fast]'``). It registers
``group_centre``, ``sorted_runs`` and ``run_starts`` through ``rllm_register_kernels``, as any
third-party kernel plugin would. ``RLLM_DISABLED_PLUGINS=fast`` turns it off;
``RLLM_KERNEL_THREADS`` (or :func:`threads` for a block of code) caps the threads one call uses.
"""

from rllm_fast.parts import threads

__all__ = ["threads"]
