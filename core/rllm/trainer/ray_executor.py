"""Moved to :mod:`rllm.rollouts.ray_executor`; this path keeps working (importing it needs ``rllm[ray]``)."""

from rllm.rollouts.ray_executor import LOOPBACK, RayExecutor, WorkerFailure, start_local_ray

__all__ = ["LOOPBACK", "RayExecutor", "WorkerFailure", "start_local_ray"]
