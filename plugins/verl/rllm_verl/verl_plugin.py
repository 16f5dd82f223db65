"""The ``verl.plugins`` entry point: verl imports this module when it is imported itself.

verl swallows an exception raised by a plugin (it logs it at debug level), so a failure here
is reported as a warning instead: without it a run would only say that ``rllm.<name>`` is an
unknown estimator (or, with ``VERL_PLATFORM=cpu``, that ``cpu`` is an unknown platform).
"""

from __future__ import annotations

import warnings

from rllm.errors import PluginWarning
from rllm_verl.cpu_platform import register_cpu_platform
from rllm_verl.inside_verl import register_in_verl
from rllm_verl.losses_in_verl import register_losses_in_verl

try:
    REGISTERED: list[str] = register_in_verl() + register_losses_in_verl()
except Exception as exc:
    REGISTERED = []
    warnings.warn(
        f"rllm could not register its estimators and losses in verl ({type(exc).__name__}: {exc}); the rllm.* "
        "estimators and losses are unavailable in this process. Check that rllm and verl import together, "
        "then call rllm_verl.register_in_verl() and register_losses_in_verl() to see the full error.",
        PluginWarning,
        stacklevel=2,
    )

try:  # opt-in: VERL_PLATFORM=cpu (rllm_verl.cpu_platform)
    CPU_PLATFORM: bool = register_cpu_platform()
except Exception as exc:
    CPU_PLATFORM = False
    warnings.warn(f"rllm could not register its CPU platform in verl: {exc}", PluginWarning, stacklevel=2)
