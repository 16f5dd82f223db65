"""A CPU platform for verl, so verl's own training worker runs here on gloo (opt-in: ``VERL_PLATFORM=cpu``).

verl 0.9.1 ships CUDA, NPU and ROCm platforms only. Registered through verl's platform registry
(the ``verl.plugins`` entry point imports this module when verl is imported), this one answers
device "cpu", communication backend "gloo", device 0, and a device module whose memory
statistics are 0. Two more things verl needs on a CPU are in :func:`prepare_cpu_process`:
``VERL_ENGINE_DEVICE=cuda`` (verl registers its FSDP engine for cuda and npu only) and the
process group started with gloo before the worker (verl would ask for ``cpu:gloo,cpu:gloo``), and
the reference worker's CPU offload without pinned memory (torch pins only for an accelerator).

The shims lean on verl internals, so verl versions other than :data:`TESTED_VERL` are refused by name.
"""

from __future__ import annotations

import os
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rllm.errors import PluginError
from rllm_verl.process_group import start_process_group

PLATFORM = "cpu"
TESTED_VERL = ("0.9.1",)
"""The verl versions the CPU platform and the worker harness are tested with."""


def check_verl_version() -> str:
    """The installed verl's version, or a one-line error when the shims were not tested with it."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("verl")
    except PackageNotFoundError:
        raise PluginError("verl is not installed; pip install 'rllm[verl]' (tested with verl 0.9.1).") from None
    if found not in TESTED_VERL:
        raise PluginError(
            f"rllm_verl's CPU platform and worker harness are tested with verl {', '.join(TESTED_VERL)}, not the "
            f"installed verl {found}; install verl=={TESTED_VERL[-1]}."
        )
    return found


def _zero(*_args: Any, **_kwargs: Any) -> int:
    return 0


def _nothing(*_args: Any, **_kwargs: Any) -> None:
    return None


def _device_module() -> types.ModuleType:
    """``torch.cpu`` with what verl asks of ``torch.cuda`` besides: memory statistics (0) and cache calls (no-ops)."""
    import torch

    module = types.ModuleType("rllm_verl_cpu_device")
    for name in dir(torch.cpu):
        if not name.startswith("_"):
            setattr(module, name, getattr(torch.cpu, name))
    for name in (
        "memory_allocated",
        "memory_reserved",
        "max_memory_allocated",
        "max_memory_reserved",
    ):
        setattr(module, name, _zero)
    for name in ("empty_cache", "ipc_collect", "reset_peak_memory_stats", "set_per_process_memory_fraction"):
        setattr(module, name, _nothing)
    module.mem_get_info = lambda *_args, **_kwargs: (0, 0)  # type: ignore[attr-defined]
    module.get_device_name = lambda *_args, **_kwargs: "cpu"  # type: ignore[attr-defined]
    module.get_rng_state = torch.get_rng_state  # type: ignore[attr-defined]
    module.set_rng_state = torch.set_rng_state  # type: ignore[attr-defined]
    module.manual_seed = torch.manual_seed  # type: ignore[attr-defined]
    module.manual_seed_all = torch.manual_seed  # type: ignore[attr-defined]
    module.current_device = lambda: "cpu"  # type: ignore[attr-defined]
    return module


def register_cpu_platform() -> bool:
    """Register the CPU platform in verl's registry when ``VERL_PLATFORM=cpu``; whether it was registered."""
    if os.environ.get("VERL_PLATFORM", "").strip().lower() != PLATFORM:
        return False
    check_verl_version()
    from verl.plugin.platform import PlatformBase, PlatformRegistry

    registered = PlatformRegistry.get(PLATFORM)
    if registered is not None and registered.__module__ == __name__:
        return True

    class PlatformCPU(PlatformBase):
        """verl's device calls answered on a CPU (rllm_verl.cpu_platform)."""

        _module: types.ModuleType | None = None

        @property
        def device_name(self) -> str:
            return "cpu"

        @property
        def vendor_name(self) -> str:
            return "cpu"

        @property
        def device_module(self) -> types.ModuleType:
            if PlatformCPU._module is None:
                PlatformCPU._module = _device_module()
            return PlatformCPU._module

        def is_available(self) -> bool:
            return True

        def current_device(self) -> Any:
            return "cpu"  # verl moves modules to ``current_device()``: an index would name an accelerator

        def device_count(self) -> int:
            return 1

        def set_device(self, device_index: int) -> None:
            return None

        def synchronize(self, device_index: int | None = None) -> None:
            return None

        def manual_seed(self, seed: int) -> None:
            import torch

            torch.manual_seed(seed)

        def manual_seed_all(self, seed: int) -> None:
            self.manual_seed(seed)

        def set_allocator_settings(self, settings: str) -> None:
            return None

        def empty_cache(self) -> None:
            return None

        def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
            return None, None

        def communication_backend_name(self) -> str:
            return "gloo"

        def visible_devices_envvar(self) -> str:
            return "CUDA_VISIBLE_DEVICES"

        @contextmanager
        def nvtx_range(self, msg: str) -> Iterator[None]:
            yield

        def profiler_start(self) -> None:
            return None

        def profiler_stop(self) -> None:
            return None

        def ray_resource_name(self) -> str:
            return "CPU"

        def ray_noset_envvars(self) -> list[str]:
            return []

        def is_ipc_supported(self) -> bool:
            return False

        def cudart(self) -> Any:
            return None

    PlatformRegistry.register(platform=PLATFORM)(PlatformCPU)
    return True


def _unpinned_offload() -> None:
    """verl's forward-only (reference) FSDP2 engine offloads to pinned CPU memory; with no accelerator torch cannot
    pin, and the parameters are on the CPU already, so the CPU platform's offload policy pins nothing."""
    import verl.workers.engine.fsdp.transformer_impl as engine
    from torch.distributed.fsdp import CPUOffloadPolicy

    def unpinned(pin_memory: bool = True) -> CPUOffloadPolicy:
        return CPUOffloadPolicy(pin_memory=False)

    engine.CPUOffloadPolicy = unpinned  # type: ignore[attr-defined, assignment]


def prepare_cpu_process(rank: int = 0, world_size: int = 1) -> None:
    """What a process needs before it builds verl's worker on the CPU: the platform, the engine, the process group.

    Under torchrun the ranks come from its environment; a single process gets a loopback store.
    """
    os.environ["VERL_PLATFORM"] = PLATFORM
    os.environ["VERL_ENGINE_DEVICE"] = "cuda"  # verl registers its FSDP engine for cuda and npu only
    import verl  # noqa: F401  (its plugin hook registers the platform, imported or not before)

    register_cpu_platform()
    from verl.plugin.platform import get_platform

    if get_platform().device_name != PLATFORM:
        raise PluginError(
            "verl chose its platform before VERL_PLATFORM=cpu was set; set it in the environment before verl is "
            "imported (or call rllm_verl.cpu_platform.prepare_cpu_process first)."
        )
    _unpinned_offload()
    start_process_group("gloo", rank, world_size)
