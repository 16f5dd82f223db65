"""The Tinker service's state and routes: sessions, the one training model, sampling sessions and checkpoints.

Every long request (create model, forward, forward_backward, optim_step, saves, loads, samples)
is checked when it arrives (:mod:`.checks`; a bad one is answered at once, 400 or 404, naming
the route and field) and then queued (:mod:`.work_queue`): one worker runs the queue in arrival
order on a thread (concurrent samples in batches), and its answer waits under a request id for
``retrieve_future``. The server trains one model at a time: a
second ``create_model`` while another session's model is live is refused by name; the model is
freed when its session finishes (``ServiceClient.close``) or stops heartbeating for
:data:`SESSION_TIMEOUT` seconds, and the next ``create_model`` starts from the base weights.
"""

from __future__ import annotations

import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rllm_transformers.tinker_server.checks import adam_params, check_batch, read_sample
from rllm_transformers.tinker_server.sampling import SampleJob
from rllm_transformers.tinker_server.trainer import TinkerTrainer
from rllm_transformers.tinker_server.wire import Batch, WireError, forward_output
from rllm_transformers.tinker_server.work_queue import Answer, WorkQueue, json_answer

SESSION_TIMEOUT = 35.0
"""Seconds without a heartbeat after which a session's training model is freed: the SDK beats every 10 s, and a
script that exits without ``ServiceClient.close()`` sends no finish."""
SNAPSHOTS_KEPT = 3
"""Unnamed sampler snapshots (``save_weights_and_get_sampling_client``) kept on disk by default (``rllm serve --tinker
--tinker-snapshots``): the newest this many, and any a queued sample still reads; a named ``save_weights_for_sampler``
is the client's checkpoint and is never deleted. An asynchronous client with lead L needs L + 1."""


@dataclass
class Session:
    last_seen: float
    finished: bool = False


@dataclass
class Slot:
    """The training model and the session holding it (a LoRA rank asked for is trained as full weights)."""

    model_id: str
    session_id: str


class TinkerService:
    def __init__(
        self, trainer: TinkerTrainer, model_name: str, root: Path, kept: int = SNAPSHOTS_KEPT, batched: bool = True
    ) -> None:
        self.trainer = trainer
        self.kept = kept
        """Unnamed snapshots kept: the newest this many (:data:`SNAPSHOTS_KEPT` unless told)."""
        self.model_name = model_name
        self.root = root
        self.sessions: dict[str, Session] = {}
        self.slot: Slot | None = None
        self.sampling_sessions: dict[str, str | None] = {}
        """Sampling session id -> the weights directory it samples from (None: the base model)."""
        self.sampling_paths: dict[str, str] = {}
        """Sampling session id -> the ``tinker://`` path of its weights (none for a base-model session)."""
        self.snapshots: list[str] = []
        """The unnamed snapshots' directories, oldest first (those :meth:`_prune` has not deleted)."""
        self.work = WorkQueue(trainer.sample, self._prune, batched)

    # -- the queue ---------------------------------------------------------------------------

    def submit(self, route: str, work: Callable[[], Answer] | SampleJob, model_id: str | None = None) -> dict[str, Any]:
        """Queue ``work``; the answer is the SDK's ``UntypedAPIFuture``. Work on a model runs only if that model
        still holds the server when its turn comes (not if its session was freed meanwhile)."""
        if not isinstance(work, SampleJob):
            run = work

            def checked() -> Answer:
                if model_id is not None and (self.slot is None or self.slot.model_id != model_id):
                    freed = "was freed (its session finished or stopped heartbeating) before this request ran"
                    raise WireError(route, "model_id", f"model {model_id!r} {freed}.", 404)
                return run()

            work = checked
        answer: dict[str, Any] = {"request_id": self.work.submit(route, work)}
        if model_id is not None:
            answer["model_id"] = model_id
        return answer

    async def retrieve(self, route: str, request_id: Any) -> Answer:
        return await self.work.retrieve(route, request_id)

    # -- sessions and the model --------------------------------------------------------------

    def create_session(self) -> str:
        session_id = f"session-{uuid.uuid4().hex[:12]}"
        self.sessions[session_id] = Session(time.monotonic())
        return session_id

    def session(self, route: str, session_id: Any, where: str = "session_id") -> Session:
        session = self.sessions.get(session_id) if isinstance(session_id, str) else None
        if session is None:
            raise WireError(route, where, f"no session {session_id!r} on this server; create a ServiceClient.", 404)
        return session

    def heartbeat(self, route: str, session_id: Any) -> None:
        session = self.session(route, session_id)
        if session.finished:
            raise WireError(route, "session_id", f"session {session_id!r} has finished.", 410)
        session.last_seen = time.monotonic()

    def finish(self, session_id: str) -> None:
        session = self.sessions.get(session_id)
        if session is not None:
            session.finished = True
        if self.slot is not None and self.slot.session_id == session_id:
            self.slot = None

    def check_base_model(self, route: str, name: Any, where: str = "base_model") -> None:
        if name != self.model_name:
            raise WireError(
                route,
                where,
                f"unknown model {name!r}; this server serves {self.model_name!r} (get_server_capabilities).",
                404,
            )

    def create_model(self, route: str, body: dict[str, Any]) -> dict[str, Any]:
        session_id = body.get("session_id")
        self.session(route, session_id)
        self.check_base_model(route, body.get("base_model"))
        lora = body.get("lora_config") or {}
        for part in ("train_mlp", "train_attn", "train_unembed"):
            if lora.get(part, True) is False:
                raise WireError(
                    route, f"lora_config.{part}", "false is not served: this server trains every weight (no LoRA yet)."
                )
        optimizer = (body.get("optimizer_config") or {}).get("type", "adamw")
        if optimizer != "adamw":
            raise WireError(route, "optimizer_config.type", f"{optimizer!r} is not served; only adamw.")
        model_id = f"{session_id}:train:{body.get('model_seq_id', 0)}"
        self._claim(route, model_id, str(session_id))

        def work() -> Answer:
            self.trainer.reset()
            return json_answer({"model_id": model_id, "type": "create_model"})

        return self.submit(route, work, model_id)

    def _claim(self, route: str, model_id: str, session_id: str) -> None:
        held = self.slot
        if held is not None:
            owner = self.sessions.get(held.session_id)
            if owner is not None and not owner.finished and time.monotonic() - owner.last_seen < SESSION_TIMEOUT:
                raise WireError(
                    route,
                    "base_model",
                    f"this server trains one model at a time and {held.model_id!r} holds it; close that "
                    "ServiceClient (or start another server) first.",
                )
        self.slot = Slot(model_id, session_id)

    def model(self, route: str, model_id: Any, where: str = "model_id") -> Slot:
        if self.slot is None or model_id != self.slot.model_id:
            live = f"; the live one is {self.slot.model_id!r}" if self.slot is not None else ""
            raise WireError(route, where, f"unknown model {model_id!r}{live}.", 404)
        return self.slot

    def info(self, route: str, body: dict[str, Any]) -> dict[str, Any]:
        slot = self.model(route, body.get("model_id"))
        config = self.trainer.model.config
        return {
            "type": "get_info",
            "model_id": slot.model_id,
            "model_name": self.model_name,
            "is_lora": False,
            "lora_rank": None,
            "model_data": {
                "arch": str(getattr(config, "model_type", "")),
                "model_name": self.model_name,
                "tokenizer_id": self.model_name,
            },
        }

    # -- training ---------------------------------------------------------------------------

    def forward_backward(self, route: str, batch: Batch) -> dict[str, Any]:
        slot = self.model(route, batch.model_id)
        settings = check_batch(route, batch, self.trainer.vocab, self.trainer.context_limit)

        def work() -> Answer:
            outputs, metrics = self.trainer.forward_backward(batch, settings)
            return lambda proto: forward_output(outputs, metrics, proto)

        return self.submit(route, work, slot.model_id)

    def optim_step(self, route: str, body: dict[str, Any]) -> dict[str, Any]:
        slot = self.model(route, body.get("model_id"))
        params = adam_params(route, body)

        def work() -> Answer:
            return json_answer({"metrics": self.trainer.optim_step(params)})

        return self.submit(route, work, slot.model_id)

    # -- checkpoints ------------------------------------------------------------------------

    def _path(self, route: str, model_id: str, kind: str, name: Any) -> tuple[str, Path]:
        if not isinstance(name, str) or not name or "/" in name or name.startswith("."):
            raise WireError(route, "path", f"{name!r} is not a checkpoint name (letters, digits, - _ . ; no '/').")
        return f"tinker://{model_id}/{kind}/{name}", self.root / model_id.replace(":", "_") / kind / name

    def directory(self, route: str, path: Any, where: str = "path") -> Path:
        """The directory a ``tinker://`` path this server wrote names."""
        prefix = "tinker://"
        parts = path[len(prefix) :].split("/") if isinstance(path, str) and path.startswith(prefix) else []
        if len(parts) != 3 or parts[1] not in ("weights", "sampler_weights"):
            raise WireError(
                route, where, f"{path!r} is not a tinker://MODEL_ID/weights/NAME (or sampler_weights) path."
            )
        directory = self.root / parts[0].replace(":", "_") / parts[1] / parts[2]
        if not directory.is_dir():
            raise WireError(route, where, f"{path!r}: no such checkpoint on this server.", 404)
        return directory

    def save_weights(self, route: str, body: dict[str, Any]) -> dict[str, Any]:
        slot = self.model(route, body.get("model_id"))
        path, directory = self._path(route, slot.model_id, "weights", body.get("path"))

        def work() -> Answer:
            self.trainer.save_state(directory)
            return json_answer({"path": path, "type": "save_weights"})

        return self.submit(route, work, slot.model_id)

    def save_for_sampler(self, route: str, body: dict[str, Any]) -> dict[str, Any]:
        slot = self.model(route, body.get("model_id"))
        name = body.get("path")
        session = None
        if name is None:  # save_weights_and_get_sampling_client: a sampling session on a fresh snapshot
            name = f"snapshot-{body.get('sampling_session_seq_id', 0)}-{uuid.uuid4().hex[:8]}"
            session = f"{slot.session_id}:sample:{name}"
        path, directory = self._path(route, slot.model_id, "sampler_weights", name)

        def work() -> Answer:
            self.trainer.save_sampler(directory)
            if session is None:
                return json_answer({"path": path, "type": "save_weights_for_sampler"})
            self.sampling_sessions[session], self.sampling_paths[session] = str(directory), path
            self.snapshots.append(str(directory))
            # no path: SDK 0.18 asserts there is none when it asked for a sampling session
            return json_answer({"sampling_session_id": session, "type": "save_weights_for_sampler"})

        return self.submit(route, work, slot.model_id)

    def _prune(self) -> None:
        """Delete the snapshots past the newest :attr:`kept` that no queued sample reads, and their sampling sessions
        (run between two requests, so none is sampling from them)."""
        if len(self.snapshots) <= self.kept:
            return
        wanted = self.work.queued_weights()
        old, kept = self.snapshots[: -self.kept], self.snapshots[-self.kept :]
        gone = {directory for directory in old if directory not in wanted}
        self.snapshots = [directory for directory in old if directory in wanted] + kept
        for session in [s for s, directory in self.sampling_sessions.items() if directory in gone]:
            del self.sampling_sessions[session]
            self.sampling_paths.pop(session, None)
        for directory in gone:
            shutil.rmtree(directory, ignore_errors=True)

    def load_weights(self, route: str, body: dict[str, Any]) -> dict[str, Any]:
        directory = self.directory(route, body.get("path"))
        if not (directory / "transformers.json").is_file():
            raise WireError(
                route, "path", "names sampler weights; load_weights takes a save_state path (.../weights/NAME)."
            )
        with_optimizer = bool(body.get("optimizer"))
        if body.get("session_id") is not None:  # create_training_client_from_state: a new model, loaded
            self.session(route, body["session_id"])
            if body.get("base_model") is not None:
                self.check_base_model(route, body["base_model"])
            model_id = f"{body['session_id']}:train:{body.get('model_seq_id', 0)}"
            self._claim(route, model_id, str(body["session_id"]))
        else:
            model_id = self.model(route, body.get("model_id")).model_id

        def work() -> Answer:
            self.trainer.reset()
            self.trainer.load_state(directory, with_optimizer)
            return json_answer({"path": body["path"], "model_id": model_id, "type": "load_weights"})

        return self.submit(route, work, model_id)

    # -- sampling ---------------------------------------------------------------------------

    def create_sampling_session(self, route: str, body: dict[str, Any]) -> dict[str, Any]:
        self.session(route, body.get("session_id"))
        path = body.get("model_path")
        if path is not None:
            weights: str | None = str(self.directory(route, path, "model_path"))
        else:
            self.check_base_model(route, body.get("base_model"))
            weights = None
        session = f"{body['session_id']}:sample:{body.get('sampling_session_seq_id', 0)}"
        self.sampling_sessions[session] = weights
        if path is not None:
            self.sampling_paths[session] = str(path)
        return {"type": "create_sampling_session", "sampling_session_id": session}

    def sampler(self, route: str, sampling_session_id: str) -> dict[str, Any]:
        """``GET samplers/{id}``: what a sampling session samples from (the SDK asks for its base model)."""
        if sampling_session_id not in self.sampling_sessions:
            raise WireError(route, "sampler_id", _no_session(sampling_session_id, self.kept), 404)
        path = self.sampling_paths.get(sampling_session_id)
        return {"sampler_id": sampling_session_id, "base_model": self.model_name, "model_path": path}

    def weights_info(self, route: str, body: dict[str, Any]) -> dict[str, Any]:
        """``weights_info``: a checkpoint's base model; every checkpoint here is full weights."""
        self.directory(route, body.get("tinker_path"), "tinker_path")
        return {"base_model": self.model_name, "is_lora": False, "lora_rank": None}

    def sample(self, route: str, body: dict[str, Any]) -> dict[str, Any]:
        if body.get("sampling_session_id") is not None:
            if body["sampling_session_id"] not in self.sampling_sessions:
                raise WireError(route, "sampling_session_id", _no_session(body["sampling_session_id"], self.kept), 404)
            weights = self.sampling_sessions[body["sampling_session_id"]]
        elif body.get("model_path") is not None:
            weights = str(self.directory(route, body["model_path"], "model_path"))
        else:
            self.check_base_model(route, body.get("base_model"))
            weights = None
        job = read_sample(route, body, weights, self.trainer.vocab, self.trainer.context_limit)
        answer = self.submit(route, job)
        answer["sample_sequence_ids"] = [f"seq-{uuid.uuid4().hex[:12]}" for _ in range(job.count)]
        return answer


def _no_session(session: Any, kept: int) -> str:
    return (
        f"no sampling session {session!r} (a save_weights_and_get_sampling_client snapshot is deleted once "
        f"{kept} newer ones exist: rllm serve --tinker --tinker-snapshots keeps more; save_weights_for_sampler(name) "
        "keeps one)."
    )
