"""The process group verl's worker needs, started before it is built: gloo on the CPU; gloo and NCCL on a GPU.

Under torchrun the ranks come from its environment; a single process gets rank 0 of 1 and a
loopback address with a free port.
"""

from __future__ import annotations

import os

from rllm.errors import ConfigError


def start_process_group(backend: str, rank: int = 0, world_size: int = 1) -> None:
    """``torch.distributed.init_process_group(backend)`` from the environment (defaults for one process); no-op when
    a group is up."""
    import torch.distributed as dist

    if dist.is_initialized():
        return
    for key, value in (
        ("RANK", str(rank)),
        ("WORLD_SIZE", str(world_size)),
        ("LOCAL_RANK", str(rank)),
        ("MASTER_ADDR", "127.0.0.1"),
    ):
        os.environ.setdefault(key, value)
    if "MASTER_PORT" not in os.environ:
        import socket

        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = str(probe.getsockname()[1])
    dist.init_process_group(backend, rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))


def require_cuda() -> None:
    """``rllm.verl.device=cuda`` where it can run, else a one-line error naming the key."""
    import torch

    if not torch.cuda.is_available():
        raise ConfigError(
            "rllm.verl.device=cuda, but torch sees no CUDA device (or this torch is a CPU build); use "
            "rllm.verl.device=cpu."
        )
    if os.environ.get("VERL_PLATFORM", "").strip().lower() == "cpu":
        raise ConfigError("rllm.verl.device=cuda, but VERL_PLATFORM=cpu is set; unset it or use rllm.verl.device=cpu.")


def prepare_cuda_process() -> None:
    """A GPU process for verl's worker: verl's own CUDA platform, this rank's GPU, and the group verl's workers start
    (CPU tensors over gloo, CUDA tensors over NCCL)."""
    import torch

    require_cuda()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    start_process_group("cpu:gloo,cuda:nccl")
