"""The Ray executor: workflows run in a pool of Ray actors, on this machine or a cluster.

Chosen with ``rllm.workflow.executor: ray`` (``pip install 'rllm[ray]'``). The workflow engine
keeps ordering, retries, timeouts, seeds and the failure policy, so a run gives the same
episodes as with the local executor; this module only moves calls to workers and results
back. Per batch the workflow class, its arguments and the rollout engine travel once (what
the engine's ``for_workers()`` returns: by default a copy of the engine itself); per episode
only the task, its id and its seed do. ray is imported when the executor starts, never before.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import traceback
import uuid
from collections.abc import Mapping
from typing import Any

from rllm.engine import engine_problem
from rllm.errors import ConfigError, NameNotFoundError, TrainerError
from rllm.trainer.engine import WorkflowCall, instantiate
from rllm.types import Episode

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
            return ("ok", await instantiate(call, engine).run(task, uid))
        except NameNotFoundError as exc:
            return _failure(exc, WORKER_PLUGINS_HINT)
        except Exception as exc:
            return _failure(exc)


class RayExecutor:
    """Runs workflow calls on ``num_workers`` Ray actors, each sent to the least busy one.

    ``address`` joins an existing cluster; None uses the Ray instance already initialised in
    this process, or starts a local one (shut down again by :meth:`shutdown`). Each actor
    reserves ``num_cpus``, ``num_gpus`` and ``resources``. A killed actor comes back in a new
    process; the calls it was running fail, and the engine's failure policy decides (retry
    re-runs them with the same seed).
    """

    def __init__(
        self,
        num_workers: int = 2,
        *,
        address: str | None = None,
        num_cpus: float = 1.0,
        num_gpus: float = 0.0,
        resources: Mapping[str, float] | None = None,
    ) -> None:
        if importlib.util.find_spec("ray") is None:
            raise ConfigError("rllm.workflow.executor=ray needs ray: pip install 'rllm[ray]'.")
        if int(num_workers) < 1:
            raise ConfigError(f"rllm.workflow.ray.num_workers must be at least 1, got {num_workers}.")
        for key, value in {"num_cpus": num_cpus, "num_gpus": num_gpus, **dict(resources or {})}.items():
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise ConfigError(f"rllm.workflow.ray resource {key!r} must be a number >= 0, got {value!r}.")
        self.num_workers = int(num_workers)
        self.address = address
        self.num_cpus = float(num_cpus)
        self.num_gpus = float(num_gpus)
        self.resources = {str(k): float(v) for k, v in dict(resources or {}).items()}
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
        )

    async def start(self) -> None:
        ray = _ray()
        if not ray.is_initialized():
            ray.init(address=self.address, include_dashboard=False, log_to_driver=False)
            self._owns_ray = True
        actor = ray.remote(_Worker).options(
            num_cpus=self.num_cpus,
            num_gpus=self.num_gpus,
            resources=self.resources or None,
            max_restarts=-1,  # a killed worker comes back in a new process...
            max_task_retries=0,  # ...and the engine, not Ray, decides whether its episodes run again
            max_concurrency=100_000,
        )
        self.workers = [actor.remote() for _ in range(self.num_workers)]
        self._busy = [0] * self.num_workers

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
        index = min(range(self.num_workers), key=self._busy.__getitem__)
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
        if not self.workers:
            return
        ray = _ray()
        for worker in self.workers:
            ray.kill(worker, no_restart=True)
        self.workers = []
        if self._owns_ray:
            ray.shutdown()
            self._owns_ray = False
