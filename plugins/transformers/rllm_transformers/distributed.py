"""The transformers backend on torch.distributed: the ranks ``torchrun`` starts, their checks and collectives.

A run is data-parallel when ``WORLD_SIZE`` (set by ``torchrun``) is above 1. :func:`start`
checks what can be checked from the config alone (the strategy, the batch splitting among the
ranks), joins the process group (gloo on the CPU, NCCL on GPUs), and compares a hash of every
rank's resolved config, naming the first key that differs. :class:`Distributed` then carries
the run: JSON gathers for the trainer (episodes, counters), row gathers and sums for the
update, and the diagnosis of a lost rank: every rank beats a counter in the rendezvous store,
so when a collective fails (or the launcher stops this rank) the ranks whose counter stood
still are named, in one line, instead of a hang or a traceback.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import signal
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from datetime import timedelta
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from omegaconf import DictConfig, OmegaConf

from rllm.errors import ConfigError, RLLMWarning, TrainerError
from rllm.trainer import ProcessGroup, share_of
from rllm_transformers.sharding import shard_from_rank0

T = TypeVar("T")

BEAT_SECONDS = 0.5
"""How often every rank bumps its counter in the rendezvous store."""
STILL_BEATS = 4
"""A rank whose counter did not move for this many beats is lost."""
RANK_SEED_STRIDE = 1_000_003
"""Rank r seeds torch's default generator with ``seed + r * RANK_SEED_STRIDE`` (dropout and any other default draw)."""


def world_size() -> int:
    """The ranks torchrun (or the ``WORLD_SIZE`` variable) asks for; 1 outside a launcher."""
    text = os.environ.get("WORLD_SIZE", "1").strip() or "1"
    try:
        return int(text)
    except ValueError:
        raise ConfigError(f"The environment variable WORLD_SIZE={text!r} is not a number of ranks.") from None


def check_launch(config: DictConfig, world: int) -> None:
    """What the config alone decides, before any rendezvous or rollout: the strategy and the batch's split."""
    executor = str(config.rllm.workflow.executor)
    if executor != "local":
        raise ConfigError(
            f"rllm.workflow.executor={executor} with {world} torchrun ranks is not supported: each rank rolls out its "
            "share of the batch in its own process; set rllm.workflow.executor=local, or train in one process to "
            "roll out on Ray workers."
        )
    data = config.rllm.data
    batch = int(data.train_batch_size) * int(config.rllm.rejection_sample.multiplier)
    if batch % world:
        raise ConfigError(
            f"rllm.data.train_batch_size={int(data.train_batch_size)} (times rejection_sample.multiplier, {batch} "
            f"tasks) does not split evenly among the {world} ranks (WORLD_SIZE={world}); make it a multiple of "
            f"{world} or launch a number of ranks that divides it."
        )


def start(config: DictConfig) -> Distributed | None:
    """Join the run's process group when launched with several ranks (None for one process)."""
    world = world_size()
    if world <= 1:
        return None
    check_launch(config, world)
    try:
        rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
        address, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    except (KeyError, ValueError) as exc:
        raise ConfigError(
            f"WORLD_SIZE={world} asks for a data-parallel run, but the environment lacks a valid {exc}; launch "
            "with torchrun (it sets RANK, LOCAL_RANK, MASTER_ADDR and MASTER_PORT)."
        ) from None
    timeout = float(config.rllm.transformers.distributed.timeout)
    cuda = str(config.rllm.transformers.device) != "cpu" and torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(local_rank)
    try:
        dist.init_process_group("nccl" if cuda else "gloo", init_method="env://", timeout=timedelta(seconds=timeout))
    except (RuntimeError, ValueError) as exc:  # DistStoreError, DistNetworkError: a rendezvous that never completed
        raise TrainerError(
            f"Rank {rank} of {world}: the torch.distributed rendezvous at {address}:{port} did not complete within "
            f"rllm.transformers.distributed.timeout={timeout:g} s ({str(exc).splitlines()[0]}); start every rank "
            "(torchrun --nproc_per_node N on each node, the same --master_addr/--master_port) or raise the timeout."
        ) from None
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    strategy = str(config.rllm.transformers.distributed.strategy)
    group = Distributed(rank, world, device, address, port, strategy)
    try:
        group.check_same_config(config)
    except BaseException:
        group.close()  # the process exits next: its heartbeat must not be mid-call when the store goes
        raise
    return group


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    """A resolved config as ``{dotted key: leaf}``, the form in which two ranks' configs are compared."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(_flat(item, f"{prefix}{key}."))
        return out or {prefix.rstrip("."): {}}
    return {prefix.rstrip("."): value}


class Distributed:
    """This rank's process group: the trainer's :class:`ProcessGroup` and the backend's tensor collectives."""

    def __init__(
        self, rank: int, world: int, device: torch.device, address: str, port: int, strategy: str = "ddp"
    ) -> None:
        self.rank, self.world_size, self.device = rank, world, device
        self.sharded = strategy == "fsdp"
        """FSDP2: the trained copy's parameters, gradients and optimizer state are split among the ranks."""
        self.address, self.port = address, port
        self._diagnosing = False
        self._stop = threading.Event()
        self._beats = self._store()
        self._beats.add(self._key(rank), 1)
        self._beater = threading.Thread(target=self._beat, name="rllm-heartbeat", daemon=True)
        self._beater.start()
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._on_sigterm)
        if rank > 0:  # every rank holds the same data and says the same: rank 0 alone warns
            warnings.simplefilter("ignore", RLLMWarning)

    @property
    def unsharded_place(self) -> str:
        """Where a model that this rank shards, and keeps no whole copy of on its device, is loaded: rank 0's host
        memory (what fills the shards), elsewhere its shape only (the meta device)."""
        return "meta" if self.rank else "cpu"

    def seed(self, run_seed: int) -> None:
        """Seed this rank's default torch generator from the run seed (after the model is built alike everywhere)."""
        torch.manual_seed(run_seed + self.rank * RANK_SEED_STRIDE)

    # -- the trainer's view ------------------------------------------------------------------
    @property
    def group(self) -> ProcessGroup:
        return ProcessGroup(self.rank, self.world_size, self.gather, self.barrier)

    def gather(self, value: Any) -> list[Any]:
        """Every rank's JSON-able ``value``, in rank order (as JSON bytes: nothing is unpickled)."""
        data = json.dumps(value).encode("utf-8")
        size = torch.tensor([len(data)], dtype=torch.long, device=self.device)
        sizes = [torch.zeros_like(size) for _ in range(self.world_size)]
        self._collective("gathering episodes and counters", dist.all_gather, sizes, size)
        longest = max(int(s) for s in sizes)
        mine = torch.zeros(longest, dtype=torch.uint8)
        mine[: len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else mine[:0]
        parts = [torch.zeros(longest, dtype=torch.uint8, device=self.device) for _ in range(self.world_size)]
        self._collective("gathering episodes and counters", dist.all_gather, parts, mine.to(self.device))
        return [json.loads(part[: int(n)].cpu().numpy().tobytes()) for part, n in zip(parts, sizes, strict=True)]

    def barrier(self) -> None:
        self._collective("waiting for the other ranks", dist.barrier)

    # -- the backend's tensors -----------------------------------------------------------------
    def rows(self, count: int) -> range:
        """This rank's rows of a batch of ``count`` rows (:func:`rllm.rollouts.parallel.share_of`)."""
        return share_of(count, self.rank, self.world_size)

    def gather_rows(self, part: torch.Tensor, count: int) -> torch.Tensor:
        """Every rank's :meth:`rows` of a ``count``-row tensor, back in row order (the same on every rank)."""
        longest = math.ceil(count / self.world_size)
        padded = torch.zeros((longest, *part.shape[1:]), dtype=part.dtype, device=self.device)
        padded[: len(part)] = part.to(self.device)
        parts = [torch.empty_like(padded) for _ in range(self.world_size)]
        self._collective("gathering log-probs", dist.all_gather, parts, padded)
        sizes = [len(share_of(count, r, self.world_size)) for r in range(self.world_size)]
        return torch.cat([p[:n] for p, n in zip(parts, sizes, strict=True)]).to(part.device)

    def total(self, value: float) -> float:
        """The sum of ``value`` over the ranks."""
        tensor = torch.tensor([value], dtype=torch.float64, device=self.device)
        self._collective("summing the loss", dist.all_reduce, tensor)
        return float(tensor)

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """What the update trains: ``model`` under DDP (gradients averaged in backward), or under FSDP2 a copy of it
        sharded by decoder layer (:meth:`sharded_copy`). Every rank's model is the same (seeded alike)."""
        if self.sharded:
            return self.sharded_copy(model)
        from torch.nn.parallel import DistributedDataParallel

        ids = [self.device.index] if self.device.type == "cuda" else None
        return self._collective("broadcasting rank 0's weights", DistributedDataParallel, model, device_ids=ids)

    def sharded_copy(self, model: torch.nn.Module) -> torch.nn.Module:
        """A copy of ``model`` under FSDP2's ``fully_shard``, one unit per decoder layer plus the rest: each rank keeps
        1/N of the weights (and of their gradients and optimizer state) and gathers a layer's weights for its forward
        and backward, freeing them after, in the compute dtype under a mixed precision (:func:`mixed_policy`). Every
        rank must run the copy's forward as many times (it gathers). Built from ``model``'s shape and filled from rank
        0's weights (:func:`shard_from_rank0`): the other ranks' ``model`` may be shapes without storage."""
        return self._collective("sharding the model", shard_from_rank0, model, self.device, self.rank)

    def no_sync(self, model: torch.nn.Module, sync: bool) -> Any:
        """Accumulate a micro-batch's gradient locally unless ``sync`` (the mini-batch's last, which all-reduces)."""
        if self.sharded:
            model.set_requires_gradient_sync(sync)  # type: ignore[operator]
            return nullcontext()
        return nullcontext() if sync else model.no_sync()  # type: ignore[operator]

    def gather_into(self, trained: torch.nn.Module, model: torch.nn.Module) -> None:
        """The sharded ``trained``'s whole weights copied into ``model`` (its unsharded twin, maybe in host memory), one
        tensor at a time: a rank holds one gathered tensor beside the model, not a second whole copy (all ranks call
        it: it gathers). A ``model`` on the meta device (a rank that keeps no copy) only takes part. Only what the
        optimizer updates changes, so only that is gathered (with LoRA the adapters: the frozen base never moves)."""
        targets = model.state_dict(keep_vars=True)
        changed = [(name, p) for name, p in trained.named_parameters() if p.requires_grad]  # LoRA: the adapters
        with self.collective("gathering the weights"), torch.no_grad():
            for name, value in changed:
                whole = value.full_tensor() if hasattr(value, "full_tensor") else value.detach()
                if not targets[name].is_meta:
                    targets[name].copy_(whole)
                del whole

    def full_optimizer(self, trained: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """The sharded optimizer's whole state, keyed by parameter name, in rank 0's host memory (the other ranks get
        ``{}``): no rank holds it whole on its device (all ranks call it: it gathers)."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return self._collective(
            "gathering the optimizer", get_optimizer_state_dict, trained, optimizer, options=options
        )

    def load_sharded(
        self, trained: torch.nn.Module, optimizer: torch.optim.Optimizer, weights: Any, state: Any, from_rank0: bool
    ) -> None:
        """Whole weights and a name-keyed optimizer state into the sharded copy (all ranks call it). ``from_rank0``:
        only rank 0 holds the weights (the other ranks pass ``{}``), which it sends a tensor at a time. The optimizer
        state is rank 0's alone always (the other ranks pass ``{}``; None on every rank: nothing to load)."""
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_model_state_dict,
            set_optimizer_state_dict,
        )

        sent = StateDictOptions(full_state_dict=True, broadcast_from_rank0=from_rank0)
        self._collective("loading the weights", set_model_state_dict, trained, weights, options=sent)
        if state is not None:
            options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
            self._collective(
                "loading the optimizer", set_optimizer_state_dict, trained, optimizer, state, options=options
            )

    @contextmanager
    def collective(self, what: str) -> Iterator[None]:
        """Code that runs collectives (DDP's backward): a failure there is the lost-rank line."""
        try:
            yield
        except (RuntimeError, dist.DistError) as exc:
            raise self.lost(what, exc) from None

    # -- checks ---------------------------------------------------------------------------------
    def check_same_config(self, config: DictConfig) -> None:
        """Every rank resolved the same config: a hash compared at start, then the first differing key named."""
        flat = _flat(OmegaConf.to_container(config, resolve=True))
        text = json.dumps(flat, sort_keys=True, default=str)
        digests = self.gather(hashlib.sha256(text.encode()).hexdigest())
        other = next((r for r, digest in enumerate(digests) if digest != digests[0]), None)
        if other is None:
            return
        configs = self.gather(json.loads(text))
        first, theirs = configs[0], configs[other]
        key = next(k for k in sorted(set(first) | set(theirs)) if first.get(k, "<unset>") != theirs.get(k, "<unset>"))
        raise ConfigError(
            f"Rank {other} was started with another config than rank 0: {key} is {first.get(key, '<unset>')!r} on "
            f"rank 0 and {theirs.get(key, '<unset>')!r} on rank {other}; launch every rank with the same command, "
            "config files and overrides."
        )

    # -- a lost rank ------------------------------------------------------------------------------
    def _collective(self, what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        with self.collective(what):
            return fn(*args, **kwargs)

    def lost(self, what: str, cause: BaseException | None = None) -> TrainerError:
        """The one line for a failed collective: which ranks stopped beating, what this rank was doing."""
        self._diagnosing = True
        lost = self._still()
        if lost is None:
            who = "rank 0 (which holds the rendezvous store) is lost" if self.rank else "the rendezvous store is lost"
        elif lost:
            who = f"lost rank {', '.join(map(str, lost))} of {self.world_size} (its process ended or stopped)"
        else:
            reason = str(cause).splitlines()[0] if cause is not None and str(cause) else "no answer"
            who = f"every rank still runs, but a collective failed ({reason})"
        return TrainerError(
            f"Rank {self.rank}: {who} while {what}; this rank stops. If a rank printed an error, fix what it names; "
            "if one was killed, run the same command again to resume from the last checkpoint."
        )

    def _still(self) -> list[int] | None:
        """The other ranks whose beat counter stood still for :data:`STILL_BEATS` beats; None if the store is gone."""
        others = [r for r in range(self.world_size) if r != self.rank]
        try:
            store = self._store()
            before = {r: store.add(self._key(r), 0) for r in others}
            time.sleep(STILL_BEATS * BEAT_SECONDS)
            after = {r: store.add(self._key(r), 0) for r in others}
        except (RuntimeError, dist.DistError):
            return None
        return [r for r in others if after[r] == before[r]]

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        """The launcher stops the ranks when one fails: say which one, as a failed collective would."""
        if not self._diagnosing:
            raise self.lost("torchrun stopped this rank (SIGTERM)")

    def _store(self) -> dist.TCPStore:
        return dist.TCPStore(self.address, self.port, is_master=False, timeout=timedelta(seconds=10))

    @staticmethod
    def _key(rank: int) -> str:
        return f"rllm/heartbeat/{rank}"

    def _beat(self) -> None:
        while not self._stop.wait(BEAT_SECONDS):
            try:
                self._beats.add(self._key(self.rank), 1)
            except (RuntimeError, dist.DistError):
                return  # the store is gone: the run is ending

    def close(self) -> None:
        """Stop beating (waiting for a beat under way) and leave the process group."""
        self._stop.set()
        self._beater.join(timeout=STILL_BEATS * BEAT_SECONDS)
        if dist.is_initialized():
            dist.destroy_process_group()
