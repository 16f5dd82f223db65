"""``rllm.backend=tinker``: rllm's trainer driving a Tinker-API service through the official SDK (docs/tinker.md).

The model lives on the server. A LoRA training client (``rllm.tinker.base_model``, ``rank``)
trains it; workflows sample through a :class:`~rllm_tinker.engine.TinkerEngine` on a sampling
client of the latest weights. Stage 7 turns each role's trajectories into datums
(:mod:`rllm_tinker.transform`), runs ``forward_backward`` with the role's Tinker loss and one
``optim_step`` with the scheduled learning rate; after each update the trainer's policy channel
has :class:`SamplerWeights` save sampler weights and swap the engine's sampling client (asynchronously, each
update's client is a snapshot kept aside until the batch due to sample it). A
checkpoint is the server's saved state (its ``tinker://`` path in ``tinker_state.json``). The
API key is handed to the SDK in memory only: config.yaml keeps its interpolation, and nothing
this backend writes holds it.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
import warnings
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from rllm import rLLMAdvantageEstimator
from rllm.config import unhonoured_keys
from rllm.errors import ConfigError, DataError, TrainerError
from rllm.rollouts import RolloutWeights
from rllm.tasks import ArithmeticWorkflow, build_tasks
from rllm.trainer import (
    AsyncSettings,
    BackendProtocol,
    TaskLoader,
    TaskSetup,
    TrainerState,
    scheduled_lr,
    task_loader,
)
from rllm_tinker.engine import TinkerEngine, TinkerSampling
from rllm_tinker.plugin import SDK_RANGE, TINKER_LOSSES
from rllm_tinker.transform import MergedSequence, to_datum, trajectory_sequences

_SERVER_LOSS = "the server computes Tinker's loss, which has no such term; leave it at its default"
_REFUSED = {
    "rllm.algorithm.use_kl_loss": _SERVER_LOSS,
    "rllm.algorithm.kl_loss_coef": _SERVER_LOSS,
    "rllm.algorithm.entropy_coeff": _SERVER_LOSS,
    "rllm.algorithm.loss_agg_mode": "Tinker's losses are sums over tokens; leave it unset",
    "rllm.algorithm.rollout_correction": "the server's losses take the sampler's log-probs as the old policy's; "
    "leave the section at its defaults",
    "rllm.algorithm.use_kl_in_reward": "no reference policy's log-probs come back from the server; set it to false",
    "rllm.algorithm.router_replay": "the Tinker API carries no routing; set it to disabled",
}
"""rLLM's keys this backend cannot honour when set away from their default (key: why and what to do)."""
CLIPPED = ("ppo", "cispo")
"""The Tinker losses whose clip thresholds come from ``rllm.algorithm.eps_clip`` / ``eps_clip_high``."""
STATE_FILE = "tinker_state.json"
"""A checkpoint's record of the server's saved state (its path)."""


def _sdk() -> Any:
    """The ``tinker`` SDK, checked against the tested versions (one line naming the extra otherwise)."""
    low, high = (".".join(map(str, v)) for v in SDK_RANGE)
    try:
        import tinker
    except ImportError:
        raise ConfigError(
            f"rllm.backend=tinker needs the tinker SDK >={low},<{high}: pip install 'rllm[tinker]'."
        ) from None
    version = tuple(int(part) for part in str(tinker.__version__).split(".")[:2] if part.isdigit())
    if not SDK_RANGE[0] <= version < SDK_RANGE[1]:
        raise ConfigError(
            f"rllm.backend=tinker was tested with the tinker SDK >={low},<{high}, and {tinker.__version__} is "
            f"installed: pip install 'tinker>={low},<{high}'."
        )
    return tinker


@contextmanager
def remote(url: str, what: str, error: type[Exception] = TrainerError) -> Iterator[None]:
    """The SDK's errors (after its own retries) as one line naming the server and the call."""
    import tinker

    try:
        yield
    except tinker.TinkerError as exc:
        text = " ".join(str(exc).split())
        raise error(f"Tinker server {url}: {what} failed: {text}") from None


def check_reachable(url: str, seconds: float = 10.0) -> None:
    """Any HTTP answer will do; none is one line now, where the SDK would retry a refused connection for up to two
    hours without a word."""
    try:
        urllib.request.urlopen(f"{url.rstrip('/')}/api/v1/healthz", timeout=seconds).close()
    except urllib.error.HTTPError:  # it answered
        return
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ConfigError(
            f"Tinker server {url}: not reachable ({reason}); start it, or fix rllm.tinker.base_url or TINKER_BASE_URL."
        ) from None


def api_key(config: DictConfig) -> str | None:
    """``rllm.tinker.api_key``, which must be an interpolation (config.yaml then keeps it, not the key); None: the
    SDK reads ``TINKER_API_KEY`` itself."""
    section = config.rllm.tinker
    if section.get("api_key") is None:
        return None
    if not OmegaConf.is_interpolation(section, "api_key"):
        raise ConfigError(
            "rllm.tinker.api_key holds a literal key, which config.yaml would keep; put it in TINKER_API_KEY, or "
            "write rllm.tinker.api_key='${oc.env:YOUR_VARIABLE}'."
        )
    return str(section.api_key)


def default_loss(algorithm: Any) -> str:
    """Upstream's routing for a role without a loss of its own: GRPO trains with ``ppo``, others with
    ``importance_sampling``."""
    return "ppo" if str(algorithm.estimator) == str(rLLMAdvantageEstimator.GRPO) else "importance_sampling"


def check_snapshots_kept(config: DictConfig) -> None:
    """Refuse an asynchronous lead the server's kept snapshots cannot serve: batch ``u`` samples the snapshot of step
    ``u - 1 - lead`` while steps up to ``u - 1`` save theirs, so ``lead + 1`` snapshots must outlive it."""
    lead = AsyncSettings.from_config(config).lead
    kept = int(config.rllm.tinker.server_snapshots)
    if lead + 1 > kept:
        raise ConfigError(
            f"rllm.async_training lead {lead} (the smaller of staleness_threshold and max_batches_ahead) needs "
            f"{lead + 1} sampler snapshots kept on the server, and rllm.tinker.server_snapshots={kept}: start "
            f"rllm serve --tinker with --tinker-snapshots {lead + 1} and set rllm.tinker.server_snapshots={lead + 1}, "
            "or lower the lead."
        )


class SamplerWeights(RolloutWeights):
    """The policy channel's part only the service can do: sampler weights of the trained state, as a new client.

    A snapshot is the sampling client of an unnamed sampler save (``save_weights_and_get_sampling_client``, in every
    tested SDK version): the server keeps those weights fixed while training goes on, so rollouts sample the snapshot
    while the update runs (``rllm.async_training``). The SDK's sync ``.result()`` waits on the SDK's own event loop,
    which is neither the update thread (``snapshot``, called off any event loop) nor the rollouts' loop.
    """

    overlaps = True

    def __init__(self, backend: TinkerBackend) -> None:
        self.backend = backend

    def snapshot(self) -> Any:
        """A sampling client of the weights trained now (the server's snapshot of them)."""
        backend = self.backend
        with remote(backend.base_url, "save_weights_and_get_sampling_client"):
            return backend.training.save_weights_and_get_sampling_client().result()

    def load(self, snapshot: Any | None) -> None:
        """The engine samples ``snapshot`` (a client :meth:`snapshot` made), or a new one of the weights trained now."""
        sampler = self.snapshot() if snapshot is None else snapshot
        if self.backend.engine is not None:
            self.backend.engine.swap(sampler)


class TinkerBackend(BackendProtocol):
    """``rllm.backend=tinker`` (the plugin registers this class's path, so the SDK is imported when selected)."""

    def __init__(self, config: DictConfig, **kwargs: Any) -> None:
        super().__init__(config, **kwargs)
        self.options = config.rllm.tinker
        self.tinker = _sdk()
        for key, value in unhonoured_keys(config, _REFUSED).items():
            prefix = next(k for k in _REFUSED if key == k or key.startswith(k + "."))
            raise ConfigError(f"{key}={value!r} is not supported by the tinker backend: {_REFUSED[prefix]}.")
        self.losses = self._route_losses()
        self.loss_configs = self._loss_configs()
        check_snapshots_kept(config)
        if self.options.base_model is None:
            raise ConfigError("rllm.tinker.base_model is not set: name the served model to train.")
        base_url = self.options.base_url or os.environ.get("TINKER_BASE_URL")
        self.base_url = str(base_url)
        with remote(self.base_url, "create_lora_training_client (rllm.tinker.*, TINKER_API_KEY)", ConfigError):
            self.service = self.tinker.ServiceClient(base_url=base_url, api_key=api_key(config))  # checks the key
            if base_url:
                check_reachable(self.base_url)
            self.training = self.service.create_lora_training_client(
                base_model=str(self.options.base_model),
                rank=int(self.options.rank),
                seed=int(self.options.seed),
                train_mlp=bool(self.options.train_mlp),
                train_attn=bool(self.options.train_attn),
                train_unembed=bool(self.options.train_unembed),
            ).result()
        self.engine: TinkerEngine | None = None
        self._rollout_weights = SamplerWeights(self)

    # -- setup ------------------------------------------------------------------------------
    def _route_losses(self) -> dict[str, str]:
        """Each role's Tinker loss ('' is the default role), checked against ``rllm.tinker.server_losses``."""
        algorithm = self.algorithm
        served = [str(name) for name in self.options.server_losses]
        routes = {"": algorithm.loss_fn or default_loss(algorithm)}
        routes.update({role: str(loss) for role, loss in algorithm.loss_fn_map.items()})
        for role, loss in routes.items():
            key = "rllm.algorithm.loss_fn" if not role else f"rllm.algorithm.loss_fn_map.{role}"
            if loss not in TINKER_LOSSES:
                raise ConfigError(
                    f"{key}={loss!r} is not a Tinker loss; the tinker backend trains with one of "
                    f"{', '.join(TINKER_LOSSES)} (the server computes the loss)."
                )
            if loss not in served:
                raise ConfigError(
                    f"{key}={loss!r} is not among the server's losses (rllm.tinker.server_losses: "
                    f"{', '.join(served)}); "
                    "pick one of those, or list the loss if the server implements it."
                )
        return routes

    def _loss_configs(self) -> dict[str, dict[str, float]]:
        """Each routed loss's ``loss_fn_config``: clip thresholds (:meth:`_clip_config`), dro's ``beta`` from
        ``rllm.algorithm.loss_options.dro_beta``; any other loss option is refused (the server takes no other)."""
        options = dict(self.algorithm.loss_options or {})
        stray = sorted(set(options) - {"dro_beta"})
        if stray:
            raise ConfigError(
                f"rllm.algorithm.loss_options.{stray[0]} is not supported by the tinker backend: the server's losses "
                "take clip thresholds (from eps_clip) and dro's beta (dro_beta) only; leave it unset."
            )
        clip = self._clip_config()
        configs: dict[str, dict[str, float]] = {}
        for loss in set(self.losses.values()):
            if loss in CLIPPED and clip is not None:
                configs[loss] = clip
            if loss == "dro":
                configs[loss] = {"beta": float(options["dro_beta"])}  # rllm's loss check requires it for dro
        return configs

    def _clip_config(self) -> dict[str, float] | None:
        """``rllm.algorithm.eps_clip`` / ``eps_clip_high`` as the clip thresholds of ``ppo`` and ``cispo``; None at
        the defaults (0.2: Tinker's own 0.8 and 1.2), so a server that takes no loss_fn_config still serves the run."""
        algorithm = self.config.rllm.algorithm
        low = float(algorithm.eps_clip)
        high = low if algorithm.get("eps_clip_high") is None else float(algorithm.eps_clip_high)
        if (low, high) == (0.2, 0.2):
            return None
        if low > 1:
            raise ConfigError(
                f"rllm.algorithm.eps_clip={low} is above 1: Tinker's clip_low_threshold 1 - eps_clip < 0."
            )
        return {"clip_low_threshold": 1.0 - low, "clip_high_threshold": 1.0 + high}

    @property
    def loss_description(self) -> str:
        roles = "".join(f", role {role}: {loss}" for role, loss in sorted(self.losses.items()) if role)
        return f"Tinker {self.losses['']} (summed over tokens, computed by the server)" + roles

    def builtin_task(self) -> TaskSetup:
        tasks = build_tasks([str(name) for name in self.options.tasks])
        return TaskSetup(workflow_class=ArithmeticWorkflow, train_dataset=tasks, val_dataset=tasks)

    def get_dataloader(self, dataset: Sequence[Any] | None, trainer_state: TrainerState) -> TaskLoader:
        return task_loader(self.config, "tinker", dataset, trainer_state, int(self.options.seed))

    def _tokenizer(self) -> Any:
        name = self.options.tokenizer
        if name is None:
            return None
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(name))

    def init_rollout_engine(self, **kwargs: Any) -> TinkerEngine:
        options = self.options
        sampling = TinkerSampling(
            temperature=float(options.temperature),
            top_p=float(options.top_p),
            top_k=int(options.top_k),
            max_new_tokens=int(options.max_new_tokens),
            max_prompt_length=None if options.max_prompt_length is None else int(options.max_prompt_length),
            greedy_validation=bool(options.greedy_validation),
        )
        sampler = self._rollout_weights.snapshot()
        self.engine = TinkerEngine(sampler, self._tokenizer(), sampling, int(options.seed), self.base_url)
        return self.engine

    def shutdown(self) -> None:
        """Close the session, best effort: the run's weights are on the server and its checkpoints written, so a
        server that cannot close it (SkyRL 0.4.0 has no such route) gets a one-line warning; raising here would
        fail a finished run or, in the trainer's ``finally``, hide the error that stopped it."""
        try:
            with remote(self.base_url, "closing the session"):
                self.service.close("success").result()
        except TrainerError as exc:
            warnings.warn(str(exc), stacklevel=2)

    # -- stages 4 and 7 -----------------------------------------------------------------------
    def transform_to_backend_batch(self, trainer_state: TrainerState) -> dict[str, list[Any]]:
        """The trajectories of each role; their datums are built in stage 7, once the advantages exist."""
        batch: dict[str, list[Any]] = defaultdict(list)
        for group in trainer_state.trajectory_groups:
            batch[group.group_role].extend(group.trajectories)
        return dict(batch)

    def _sequences(self, trainer_state: TrainerState) -> dict[str, list[MergedSequence]]:
        """Each loss's merged sequences (roles with one loss share a ``forward_backward`` call)."""
        by_loss: dict[str, list[MergedSequence]] = defaultdict(list)
        steps = rows = 0
        for role, trajectories in trainer_state.backend_batch.items():
            loss = self.losses.get(role, self.losses[""])
            for index, trajectory in enumerate(trajectories):
                merged = trajectory_sequences(trajectory, f"role {role!r} trajectory {index}")
                by_loss[loss].extend(merged)
                steps, rows = steps + len(trajectory.steps), rows + len(merged)
        trainer_state.metrics["batch/steps_per_row"] = steps / max(rows, 1)
        return by_loss

    async def update_policy(self, trainer_state: TrainerState) -> None:
        """One ``forward_backward`` per loss (the gradients add up on the server), then one ``optim_step``, all
        submitted before any answer is awaited (the SDK sends them in order; the server runs them in order), so the
        step pays one wait for the update rather than one per call."""
        types = self.tinker.types
        options = self.options
        lr = scheduled_lr(float(options.lr), self.algorithm, trainer_state.global_step, trainer_state.total_steps)
        metrics: dict[str, float] = {"actor/lr": lr}
        tokens = 0.0
        submitted: list[tuple[str, int, Any]] = []
        for loss, sequences in sorted(self._sequences(trainer_state).items()):
            if not sequences:
                continue
            datums = [to_datum(sequence) for sequence in sequences]
            tokens += sum(sum(sequence.mask) for sequence in sequences)
            with remote(self.base_url, f"forward_backward with loss {loss}"):
                submitted.append(
                    (loss, len(datums), self.training.forward_backward(datums, loss, self.loss_configs.get(loss)))
                )
        adam = types.AdamParams(
            learning_rate=lr,
            beta1=float(options.adam_beta1),
            beta2=float(options.adam_beta2),
            eps=float(options.adam_eps),
            weight_decay=float(options.weight_decay),
        )
        with remote(self.base_url, "optim_step"):
            stepped = self.training.optim_step(adam)
        for loss, count, future in submitted:
            with remote(self.base_url, f"forward_backward with loss {loss}"):
                out = await future
            for key, value in out.metrics.items():
                metrics[f"actor/{loss}/{key}"] = float(value)
            if len(out.loss_fn_outputs) != count:
                raise TrainerError(
                    f"{self.base_url}/api/v1/forward_backward answered {len(out.loss_fn_outputs)} outputs for "
                    f"{count} datums."
                )
        with remote(self.base_url, "optim_step"):
            step = await stepped
        for key, value in (step.metrics or {}).items():
            metrics[f"actor/{key}"] = float(value)
        metrics["actor/tokens"] = tokens
        trainer_state.metrics.update(metrics)

    @property
    def rollout_weights(self) -> SamplerWeights:
        return self._rollout_weights

    # -- checkpoints --------------------------------------------------------------------------
    def save_checkpoint(self, directory: Path) -> None:
        """The server saves the weights and optimizer state; the checkpoint holds its path (never the key)."""
        name = f"rllm-{os.getpid()}-{time.time_ns()}"
        with remote(self.base_url, f"save_state {name}"):
            path = self.training.save_state(name).result().path
        record = {"state_path": path, "base_model": str(self.options.base_model)}
        (directory / STATE_FILE).write_text(json.dumps(record, indent=1), encoding="utf-8")

    def load_checkpoint(self, directory: Path) -> None:
        file = directory / STATE_FILE
        try:
            record = json.loads(file.read_text(encoding="utf-8"))
            path = str(record["state_path"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise DataError(
                f"{file}: not a tinker backend checkpoint ({exc}); resume from one this backend wrote."
            ) from None
        # the SDK calls loading onto a live client deprecated; its route is the same
        with warnings.catch_warnings(), remote(self.base_url, f"load_state_with_optimizer {path}"):
            warnings.simplefilter("ignore", FutureWarning)
            self.training.load_state_with_optimizer(path).result()
