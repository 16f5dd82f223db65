"""The policy version: which weights sampled a batch's tokens, and which policy trains on them.

One owner, :class:`PolicyVersions`, for every backend and both kinds of run. The version
counts the policy updates of the run (0: the initial weights), is checkpointed, and continues
after a resume. The owner stamps every sampled step with the version that drew it, checks that
a batch came from one version, measures how far samples lag the policy training on them, and
carries weights to where rollouts are sampled:

- synchronously, right after each update (the next batch samples the new weights);
- asynchronously (``rllm.async_training``), it keeps a snapshot of each update aside and
  loads the one a batch is due to sample from between batches, never while one samples;
- with inference servers (``rllm.rollout.openai.base_url``), it pushes the weights through the
  run's weight sync, rank 0 alone under torchrun, and gives a restarted server the weights of
  the version it should serve again.

A backend gives only what it alone can do, as :class:`RolloutWeights`: copy its trained weights,
load weights where its own engine samples, and describe them to a weight sync.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rllm.config.core_keys import MAX_STALENESS
from rllm.errors import ConfigError, TrainerError
from rllm.types import Episode, TrajectoryGroup

if TYPE_CHECKING:
    from rllm.engine.weight_sync import PolicyUpdate, WeightSync
    from rllm.rollouts.parallel import ProcessGroup

__all__ = [
    "PolicyVersions",
    "RolloutWeights",
    "check_batch_version",
    "check_weight_versions",
    "lag_metrics",
    "stamp_weight_version",
]

SECTION = "rllm.async_training"


class RolloutWeights:
    """What a backend does for the policy channel (``BackendProtocol.rollout_weights``); the owner does the rest.

    The defaults suit a backend whose engine samples the very weights it trains (nothing to load)
    and that trains synchronously. Example, a backend whose rollouts sample a copy of its model::

        class CopyWeights(RolloutWeights):
            overlaps = True

            def __init__(self, model, rollout_model):
                self.model, self.rollout_model = model, rollout_model

            def snapshot(self):
                return {name: t.detach().clone() for name, t in self.model.state_dict().items()}

            def load(self, snapshot):
                self.rollout_model.load_state_dict(self.model.state_dict() if snapshot is None else snapshot)
    """

    overlaps: bool = False
    """Whether rollouts can sample while the update runs (``rllm.async_training``): the engine samples weights of its
    own, which :meth:`load` alone changes, and :meth:`snapshot` works on the update thread."""

    def snapshot(self) -> Any:
        """A copy of the weights just trained, taken on the update thread while rollouts may sample: what
        :meth:`load` and :meth:`server_update` receive later. Needed when :attr:`overlaps` is True."""
        raise TrainerError(f"{type(self).__qualname__} cannot snapshot its weights (overlaps is False).")

    def load(self, snapshot: Any | None) -> None:
        """Make this backend's own engine sample ``snapshot`` (None: the weights trained now). Nothing samples
        meanwhile. The default does nothing: the engine samples the trained weights themselves."""

    def server_update(self, version: int, snapshot: Any | None) -> PolicyUpdate:
        """``snapshot`` (None: the weights trained now) as the update a weight sync sends to inference servers."""
        raise TrainerError(
            f"{type(self).__qualname__} cannot send its weights to inference servers (rllm.rollout.openai.base_url)."
        )


def check_weight_versions(engine: object) -> None:
    """Refuse a rollout engine that cannot say which policy version sampled (async training labels every sample)."""
    version = getattr(engine, "weight_version", None)
    if isinstance(version, bool) or not isinstance(version, int):
        kind = type(engine)
        raise ConfigError(
            f"{SECTION}.enable=true labels every sample with the policy version that drew it, but the rollout engine "
            f"{kind.__qualname__} (module {kind.__module__}) reports no integer weight_version; give it one "
            f"(rllm.engine.RolloutEngine has it) or set {SECTION}.enable=false."
        )


def stamp_weight_version(episodes: Sequence[Episode], version: int | None) -> None:
    """Label the steps no engine call labelled (``generate`` returns no version) with the batch's version."""
    if version is None:
        return
    for episode in episodes:
        for trajectory in episode.trajectories:
            for step in trajectory.steps:
                if step.weight_version is None:
                    step.weight_version = version


def check_batch_version(episodes: Sequence[Episode], version: int) -> None:
    """Refuse a batch a step of which another policy version sampled (a server whose weights changed mid-batch):
    its groups would mix policies."""
    for episode in episodes:
        for trajectory in episode.trajectories:
            for step in trajectory.steps:
                if step.weight_version != version:
                    raise TrainerError(
                        f"Episode {episode.id} of a batch sampled from policy version {version} has a step sampled by "
                        f"weight_version {step.weight_version}: the rollout weights changed mid-batch (another "
                        "process updating the inference servers?); the run stops before mixing policies in a group."
                    )


def lag_metrics(episodes: Sequence[Episode], policy_version: int, staleness: int) -> dict[str, float]:
    """How many versions the samples lag the policy training on them: the run's one family of staleness metrics.

    Per episode (its oldest step) the min, mean and max lag and one count per lag ``0..staleness``
    (at most :data:`~rllm.config.core_keys.MAX_STALENESS` + 1 keys, the threshold's bound), lags
    beyond it under ``count_over``; ``rollout/stale_steps`` counts the steps of an older version.
    Steps that carry no version are not judged.
    """
    lags, stale_steps = [], 0
    for episode in episodes:
        versions = [s.weight_version for t in episode.trajectories for s in t.steps if s.weight_version is not None]
        stale_steps += sum(policy_version > version for version in versions)
        if versions:
            lags.append(policy_version - min(versions))
    if not lags:
        return {}
    counts = Counter(lags)
    metrics = {
        "rollout/stale_steps": float(stale_steps),
        "rollout/staleness/min": float(min(lags)),
        "rollout/staleness/mean": sum(lags) / len(lags),
        "rollout/staleness/max": float(max(lags)),
    }
    top = min(staleness, MAX_STALENESS)
    metrics.update({f"rollout/staleness/count_{lag}": float(counts[lag]) for lag in range(top + 1)})
    over = sum(count for lag, count in counts.items() if lag > top)
    if over:
        metrics["rollout/staleness/count_over"] = float(over)
    return metrics


class PolicyVersions:
    """The run's policy version and the channel that takes each version's weights to where rollouts sample.

    ``version`` is the number of policy updates so far. With ``lead`` > 0 (asynchronous training)
    the batch of step ``s`` samples the version trained by step ``s - 1 - lead``; with ``lead`` 0,
    the newest. ``servers`` is the run's weight sync when rollouts come from inference servers.
    """

    def __init__(
        self,
        engine: Any,
        weights: RolloutWeights,
        *,
        asynchronous: bool,
        lead: int,
        servers: WeightSync | None = None,
        group: ProcessGroup | None = None,
    ) -> None:
        self.engine = engine
        self.weights = weights
        self.asynchronous = asynchronous
        self.lead = lead
        self.servers = servers
        self.group = group
        self.version = 0
        self.serving: int | None = None
        """The version the rollouts sample now (None: not yet set)."""
        self._after_step: dict[int, int] = {}
        """The version after each step trained by this process: what the steps ahead sample."""
        self._first = 0
        self._snapshots: dict[int, Any] = {}
        """Asynchronous training: the weights of each version a batch may still sample from."""
        self._lock = threading.Lock()
        if asynchronous:
            check_weight_versions(engine)
        if servers is not None and hasattr(engine, "resync"):
            engine.resync = self.resync

    # -- the run's course --------------------------------------------------------------------------
    def start(self, state: Any) -> None:
        """The run starts (or resumes) at the trainer state's version and step: rollouts sample it from the first
        batch on."""
        version, step = int(state.policy_version), int(state.global_step)
        self.version, self._first, self._after_step = version, step, {step: version}
        if self.asynchronous:
            self._snapshots = {version: self.weights.snapshot()}
        self._serve(version, self._snapshots.get(version))

    def updated(self, state: Any) -> None:
        """One more policy update (recorded in the trainer state, which checkpoints it). Synchronously its weights go
        where rollouts sample before the next batch; asynchronously (on the update thread, rollouts maybe
        sampling) they are kept aside as the next version."""
        self.version += 1
        state.policy_version = self.version
        if self.asynchronous:
            snapshot = self.weights.snapshot()
            with self._lock:
                self._snapshots[self.version] = snapshot
        else:
            self._serve(self.version, None)

    def step_done(self, step: int) -> None:
        """``step`` is trained: the batches waiting for its version may sample."""
        self._after_step[step] = self.version

    def version_for(self, step: int) -> int:
        """The version the batch of ``step`` samples: the policy trained ``lead`` steps before it (however fast the
        update ran, so that a run is reproducible)."""
        return self._after_step[max(self._first, step - 1 - self.lead)]

    def prepare(self, step: int) -> int:
        """Rollouts on the version the batch of ``step`` samples (between batches); returns it."""
        version = self.version_for(step)
        self.refresh(version, oldest=version)
        return version

    def newest_for_validation(self, trained_steps: int, next_step: int) -> None:
        """Rollouts on the newest policy for validation; the snapshots the next batch still needs are kept."""
        upcoming = min(trained_steps, max(self._first, next_step - 1 - self.lead))
        self.refresh(self._after_step[trained_steps], oldest=self._after_step[upcoming])

    def refresh(self, version: int, oldest: int) -> None:
        """Rollouts sample ``version``; no later call asks for a version below ``oldest``, whose weights are freed."""
        if not self.asynchronous:
            if version != self.version:
                raise TrainerError(f"Policy version {version} was asked for; a synchronous run serves {self.version}.")
            return
        with self._lock:
            kept = version in self._snapshots
            snapshot = self._snapshots.get(version)
            for old in [v for v in self._snapshots if v < oldest]:
                del self._snapshots[old]
        if not kept:
            raise TrainerError(
                f"The rollout weights of policy version {version} were asked for, but they were not kept "
                f"(kept: {sorted(self._snapshots)})."
            )
        if version != self.serving:
            self._serve(version, snapshot)

    # -- carrying weights ----------------------------------------------------------------------
    def _serve(self, version: int, snapshot: Any | None) -> None:
        """Rollouts sample ``snapshot`` (None: the trained weights) from now on, and say ``version``."""
        if self.servers is not None:
            if self.group is None or self.group.writes:  # rank 0 pushes one copy; the others wait for it
                self.servers.push(self.weights.server_update(version, snapshot))
            if self.group is not None:
                self.group.barrier()
        else:
            self.weights.load(snapshot)
        self.serving = version
        if hasattr(self.engine, "weight_version"):
            self.engine.weight_version = version

    def resync(self, server: str) -> None:
        """``server`` lost its weights (restarted): it gets those of the version rollouts sample again."""
        if self.servers is None or self.serving is None:
            return
        version = self.serving
        with self._lock:
            kept = version in self._snapshots
            snapshot = self._snapshots.get(version)
        if self.asynchronous and not kept:
            raise TrainerError(
                f"{server} lost its weights and needs policy version {version} again, which is no longer kept "
                f"(kept: {sorted(self._snapshots)})."
            )
        self.servers.push_to(self.weights.server_update(version, snapshot), server)

    # -- labels ----------------------------------------------------------------------------------
    def check(self, episodes: Sequence[Episode], version: int) -> None:
        """Asynchronously, refuse a batch sampled from ``version`` whose steps another version sampled (a synchronous
        run's engine may number its own). The workflow engine stamped the steps no model call labelled."""
        if self.asynchronous:
            check_batch_version(episodes, version)

    @staticmethod
    def label_groups(groups: Sequence[TrajectoryGroup], version: int) -> None:
        """Each group carries the version its batch sampled (a group never mixes versions)."""
        for group in groups:
            group.weight_version = version
