"""The Ray executor: workflows run in a pool of Ray actors, on this machine or a cluster.

Chosen with ``rllm.workflow.executor: ray`` (``pip install 'rllm[ray]'``). The workflow engine
keeps ordering, retries, timeouts, seeds and the failure policy, so a run gives the same
episodes as with the local executor; this module only moves calls to workers and results
back. Per batch the workflow class, its arguments and the rollout engine travel once (what
the engine's ``for_workers()`` returns: by default a copy of the engine itself); per episode
only the task, its id and its seed do. ray is imported when the executor starts, never before.

Starting is bounded: an address nothing answers at, and workers the cluster cannot place or
that do not come up within ``start_timeout`` seconds, are one-line errors naming the setting
and what the cluster has. A local instance the executor starts listens on 127.0.0.1 only.
"""

from __future__ import annotations

import asyncio
import importlib.util
import math
import os
import socket
import traceback
import uuid
import warnings
from collections.abc import Mapping
from typing import Any

from rllm.engine import engine_problem
from rllm.errors import ConfigError, NameNotFoundError, RLLMWarning, TrainerError
from rllm.rollouts.executors import WorkflowCall, run_call
from rllm.types import Episode

__all__ = ["LOOPBACK", "RayExecutor", "WorkerFailure", "start_local_ray"]

WORKER_PLUGINS_HINT = (
    "a Ray worker loads only the plugins published as entry points; a name registered at run time in the "
    "driver (a decorator in a script) is not there: publish it under the 'rllm.estimators' entry-point group "
    "(docs/plugins.md) and install that distribution where the workers run"
)


def _ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise ConfigError("rllm.workflow.executor=ray needs ray: pip install 'rllm[ray]'.") from exc
    return ray


LOOPBACK = "127.0.0.1"


def start_local_ray(**options: Any) -> None:
    """``ray.init`` of a new local instance whose processes listen on 127.0.0.1 only.

    Ray resolves a loopback ``_node_ip_address`` to the machine's interface address unless its
    cluster mode is off (its default on macOS and Windows), so that switch is off while the
    instance starts. Workers on other machines join a cluster started with ``ray start --head``
    instead, given as ``rllm.workflow.ray.address``.
    """
    ray = _ray()
    from ray._private import ray_constants

    cluster_mode = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        ray.init(_node_ip_address=LOOPBACK, include_dashboard=False, log_to_driver=False, **options)
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = cluster_mode


def _check_reachable(address: str, timeout: float) -> None:
    """A TCP connection to ``host:port`` (``ray.init`` would retry an unreachable one without end)."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return  # 'auto' and other forms Ray resolves itself
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as exc:
        raise ConfigError(
            f"rllm.workflow.ray.address={address!r}: nothing answers there within {timeout:g} s "
            f"({exc.strerror or type(exc).__name__}); start the cluster (ray start --head), fix the address, "
            "or set it to null for a local Ray instance."
        ) from None


_KEY_OF = {"CPU": "rllm.workflow.ray.num_cpus", "GPU": "rllm.workflow.ray.num_gpus"}


def _setting(resource: str, amount: float) -> str:
    key = _KEY_OF.get(resource, f"rllm.workflow.ray.resources.{resource}")
    return f"{key}={amount:g}"


def _have(totals: Mapping[str, float], names: list[str]) -> str:
    """What the cluster has of ``names``, as ``2 CPU, 0 GPU, no 'sandbox'``."""
    parts = [
        f"{totals.get(name, 0.0):g} {name}" if name in _KEY_OF or name in totals else f"no {name!r}" for name in names
    ]
    return ", ".join(parts)


class WorkerFailure(Exception):
    """A workflow failed in a worker (or the worker died); carries the error as the engine records it."""

    def __init__(self, error_type: str, message: str, trace: str = "") -> None:
        super().__init__(f"{error_type}: {message}")
        self.error_info = {"type": error_type, "message": message, "traceback": trace}


def _failure(exc: BaseException, hint: str | None = None) -> tuple[str, str, str, str]:
    message = f"{exc} ({hint})" if hint else str(exc)
    trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return ("error", type(exc).__name__, message, trace)


class _Worker:
    """One Ray actor: runs many workflows at once on its own event loop.

    A batch's workflow class, arguments and rollout engine are loaded once per worker and
    shared by all of the batch's episodes there: the first call of a batch starts the loading
    and the calls that arrive meanwhile wait for the same copy (a copy per call would give
    each episode its own engine, with its own batcher and its own copy of any random state).
    """

    def __init__(self) -> None:
        self._key: str | None = None
        self._loading: asyncio.Future[tuple[Any, ...]] | None = None

    def pid(self) -> int:
        return os.getpid()

    async def _load(self, box: list[Any]) -> tuple[Any, ...]:
        """``("ok", batch)`` or a failure tuple: the batch's one copy in this worker."""
        from ray import cloudpickle

        payload = await box[0]
        try:
            return ("ok", cloudpickle.loads(payload))
        except Exception as exc:
            return _failure(
                exc,
                "the workflow or the rollout engine cannot be loaded in the Ray worker: install the module "
                "defining it where the workers run (as a package, or with Ray's runtime_env)",
            )

    async def run(self, key: str, box: list[Any], task: Any, uid: str, seed: int | None) -> tuple[Any, ...]:
        """``("ok", episode)`` or ``("error", type, message, traceback)``: errors travel as data, in one piece."""
        if key != self._key or self._loading is None:
            self._key, self._loading = key, asyncio.ensure_future(self._load(box))
        loaded = await asyncio.shield(self._loading)  # a cancelled episode must not cancel the others' loading
        if loaded[0] != "ok":
            return loaded
        workflow_class, workflow_args, engine = loaded[1]
        call = WorkflowCall(workflow_class, workflow_args, engine, task, uid, seed)
        try:
            return ("ok", await run_call(call, engine))
        except NameNotFoundError as exc:
            return _failure(exc, WORKER_PLUGINS_HINT)
        except Exception as exc:
            return _failure(exc)


class RayExecutor:
    """Runs workflow calls on ``num_workers`` Ray actors, each sent to the least busy one.

    ``address`` joins an existing cluster; None uses the Ray instance already initialised in
    this process, or starts a local one on 127.0.0.1 (shut down again by :meth:`shutdown`).
    Each actor reserves ``num_cpus``, ``num_gpus`` and ``resources``; as many actors start as
    the cluster's nodes can hold, at most ``num_workers`` (fewer with a warning), and each must
    be running within ``start_timeout`` seconds. A killed actor comes back in a new process;
    the calls it was running fail, and the engine's failure policy decides (retry re-runs them
    with the same seed).
    """

    def __init__(
        self,
        num_workers: int = 2,
        *,
        address: str | None = None,
        num_cpus: float = 1.0,
        num_gpus: float = 0.0,
        resources: Mapping[str, float] | None = None,
        start_timeout: float = 60.0,
    ) -> None:
        if importlib.util.find_spec("ray") is None:
            raise ConfigError("rllm.workflow.executor=ray needs ray: pip install 'rllm[ray]'.")
        if int(num_workers) < 1:
            raise ConfigError(f"rllm.workflow.ray.num_workers must be at least 1, got {num_workers}.")
        for key, value in {"num_cpus": num_cpus, "num_gpus": num_gpus, **dict(resources or {})}.items():
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise ConfigError(f"rllm.workflow.ray resource {key!r} must be a number >= 0, got {value!r}.")
        if isinstance(start_timeout, bool) or not isinstance(start_timeout, int | float) or not start_timeout > 0:
            raise ConfigError(
                f"rllm.workflow.ray.start_timeout must be a number of seconds > 0, got {start_timeout!r}."
            )
        self.num_workers = int(num_workers)
        self.address = address
        self.num_cpus = float(num_cpus)
        self.num_gpus = float(num_gpus)
        self.resources = {str(k): float(v) for k, v in dict(resources or {}).items()}
        self.start_timeout = float(start_timeout)
        self.workers: list[Any] = []
        self._busy: list[int] = []
        self._owns_ray = False
        self._batch: tuple[str, list[Any]] | None = None

    @classmethod
    def from_config(cls, section: Any) -> RayExecutor:
        """From the ``rllm.workflow.ray`` section."""
        return cls(
            int(section.num_workers),
            address=None if section.address is None else str(section.address),
            num_cpus=float(section.num_cpus),
            num_gpus=float(section.num_gpus),
            resources=dict(section.resources),
            start_timeout=float(section.start_timeout),
        )

    async def start(self) -> None:
        ray = _ray()
        if not ray.is_initialized():
            address = self.address or os.environ.get("RAY_ADDRESS")
            if address:
                _check_reachable(address, self.start_timeout)
                ray.init(address=address, include_dashboard=False, log_to_driver=False)
            else:
                start_local_ray()
            self._owns_ray = True
        try:
            count = self._placeable(ray)
            actor = ray.remote(_Worker).options(
                num_cpus=self.num_cpus,
                num_gpus=self.num_gpus,
                resources=self.resources or None,
                max_restarts=-1,  # a killed worker comes back in a new process...
                max_task_retries=0,  # ...and the engine, not Ray, decides whether its episodes run again
                max_concurrency=100_000,
            )
            self.workers = [actor.remote() for _ in range(count)]
            self._busy = [0] * count
            self._wait_running(ray)
        except BaseException:
            self.shutdown()
            raise

    def _needs(self) -> dict[str, float]:
        """What one worker reserves, by Ray's resource names (CPU and GPU first)."""
        needs = {"CPU": self.num_cpus, "GPU": self.num_gpus, **self.resources}
        return {name: amount for name, amount in needs.items() if amount > 0}

    def _reserves(self, names: list[str] | None = None) -> str:
        needs = self._needs()
        return ", ".join(_setting(name, needs[name]) for name in (needs if names is None else names)) or "nothing"

    def _placeable(self, ray: Any) -> int:
        """How many workers to start: ``num_workers``, or as many as the live nodes hold (a warning), or an error."""
        needs = self._needs()
        nodes = [node["Resources"] for node in ray.nodes() if node.get("Alive")]
        if not needs:
            return self.num_workers
        fits = sum(min(math.floor(node.get(k, 0.0) / v + 1e-9) for k, v in needs.items()) for node in nodes)
        names = list(needs)
        totals = {name: sum(node.get(name, 0.0) for node in nodes) for name in names if any(name in n for n in nodes)}
        if fits == 0:
            short = [name for name in names if all(node.get(name, 0.0) < needs[name] for node in nodes)] or names
            raise ConfigError(
                f"Ray workers cannot be placed: each reserves {self._reserves(short)}, "
                f"but no node of the cluster has that (the cluster has {_have(totals, names)}); lower the "
                "reservation or add the resource to the cluster."
            )
        if fits < self.num_workers:
            warnings.warn(
                f"rllm.workflow.ray.num_workers={self.num_workers}: the cluster holds {fits} workers of "
                f"{self._reserves()} (it has {_have(totals, names)}), so {fits} "
                "start; lower num_workers or the reservation to silence this.",
                RLLMWarning,
                stacklevel=2,
            )
        return min(fits, self.num_workers)

    def _wait_running(self, ray: Any) -> None:
        """Every worker answers within ``start_timeout`` seconds, else an error saying what is free."""
        pending = [worker.pid.remote() for worker in self.workers]
        ready, late = ray.wait(pending, num_returns=len(pending), timeout=self.start_timeout)
        if late:
            raise TrainerError(
                f"{len(late)} of {len(pending)} Ray workers did not start within rllm.workflow.ray.start_timeout="
                f"{self.start_timeout:g} s: each reserves {self._reserves()} and the cluster has "
                f"{_have(ray.available_resources(), list(self._needs()) or ['CPU'])} free; free those resources "
                "(other actors hold them), lower the reservation, or raise start_timeout."
            )
        ray.get(ready)  # a worker that failed to start raises here

    async def prepare(self, call: WorkflowCall) -> None:
        """A new batch: the rollout engine (the policy) may have changed, so it is sent again."""
        self._batch = self._publish(call)

    def _publish(self, call: WorkflowCall) -> tuple[str, list[Any]]:
        ray = _ray()
        engine = call.rollout_engine
        sent = None if engine is None else engine.for_workers()
        problem = None if sent is None else engine_problem(sent)
        if problem:
            raise TrainerError(
                f"{type(engine).__name__}.for_workers() returned what workers cannot sample from: {problem}."
            )
        try:
            payload = ray.cloudpickle.dumps((call.workflow_class, call.workflow_args, sent))
        except Exception as exc:
            raise TrainerError(
                f"The rollout engine {type(engine).__name__} (or the workflow's arguments) cannot be sent to Ray "
                f"workers: {exc}. Give the engine a for_workers() method returning what workers can call "
                "(a Ray actor handle, a client of the inference server, or a copy of the weights)."
            ) from exc
        return uuid.uuid4().hex, [ray.put(payload)]

    async def run(self, call: WorkflowCall) -> Episode | None:
        ray = _ray()
        if self._batch is None:
            self._batch = self._publish(call)  # run() called without prepare(), outside the workflow engine
        key, box = self._batch
        index = min(range(len(self._busy)), key=self._busy.__getitem__)
        ref = self.workers[index].run.remote(key, box, call.task, call.uid, call.seed)
        self._busy[index] += 1
        try:
            outcome = await ref
        except asyncio.CancelledError:  # the engine's timeout: stop the rollout in the worker too
            ray.cancel(ref)
            raise
        except ray.exceptions.RayActorError as exc:
            raise WorkerFailure(
                "WorkerDied", f"Ray worker {index} died while running episode {call.uid!r}", str(exc)
            ) from None
        finally:
            self._busy[index] -= 1
        if outcome[0] == "ok":
            return outcome[1]  # type: ignore[no-any-return]
        raise WorkerFailure(*outcome[1:])

    def shutdown(self) -> None:
        if not self.workers and not self._owns_ray:
            return
        ray = _ray()
        for worker in self.workers:
            ray.kill(worker, no_restart=True)
        self.workers = []
        if self._owns_ray:
            ray.shutdown()
            self._owns_ray = False
