"""The policy version's one owner: numbering, snapshots, servers, and a resumed run continuing the version."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rllm.errors import TrainerError
from rllm.experimental.unified_trainer import UnifiedTrainer
from rllm.rollouts import PolicyVersions, RolloutWeights
from rllm.trainer.backend_protocol import TrainerState
from rllm.trainer.logging import METRICS_FILE, read_metrics


class Engine:
    weight_version = 0
    resync: Any = None


class Recorded(RolloutWeights):
    """Snapshots are the number of snapshots taken so far; every load and server update is recorded."""

    overlaps = True

    def __init__(self) -> None:
        self.taken = 0
        self.loaded: list[Any] = []
        self.described: list[tuple[int, Any]] = []

    def snapshot(self) -> int:
        self.taken += 1
        return self.taken

    def load(self, snapshot: Any) -> None:
        self.loaded.append(snapshot)

    def server_update(self, version: int, snapshot: Any) -> Any:
        self.described.append((version, snapshot))
        return ("update", version, snapshot)


class Servers:
    def __init__(self) -> None:
        self.pushed: list[Any] = []
        self.alone: list[tuple[Any, str]] = []

    def push(self, update: Any) -> None:
        self.pushed.append(update)

    def push_to(self, update: Any, server: str) -> None:
        self.alone.append((update, server))


def test_a_synchronous_run_serves_each_update_as_the_next_version() -> None:
    engine, weights = Engine(), Recorded()
    policy = PolicyVersions(engine, weights, asynchronous=False, lead=0)
    state = TrainerState(global_step=5, policy_version=3)  # resumed after 5 steps, 3 of which updated
    policy.start(state)
    assert (policy.version, engine.weight_version, weights.loaded) == (3, 3, [None])
    policy.updated(state)
    assert (policy.version, state.policy_version, engine.weight_version, weights.loaded) == (4, 4, 4, [None, None])
    policy.step_done(6)
    assert policy.prepare(7) == 4  # lead 0: the batch of step 7 samples what step 6 trained
    assert weights.taken == 0  # nothing is copied in a synchronous run
    with pytest.raises(TrainerError, match="version 3 was asked for; a synchronous run serves 4"):
        policy.refresh(3, 3)


def test_an_asynchronous_run_samples_the_version_lead_steps_back_and_frees_older_snapshots() -> None:
    engine, weights = Engine(), Recorded()
    policy = PolicyVersions(engine, weights, asynchronous=True, lead=1)
    state = TrainerState()
    policy.start(state)  # snapshot 1 is version 0
    assert (weights.loaded, engine.weight_version) == ([1], 0)
    for step in (1, 2):  # each update's snapshot is kept as the next version: 2 is version 1, 3 is version 2
        policy.updated(state)
        policy.step_done(step)
    assert engine.weight_version == 0  # nothing loads while a batch may be sampling
    assert policy.prepare(3) == 1  # step 3 - 1 - lead 1 = step 1, after which the version was 1
    assert (weights.loaded, engine.weight_version) == ([1, 2], 1)
    assert policy.prepare(4) == 2
    with pytest.raises(TrainerError, match=r"version 1 were asked for, but they were not kept \(kept: \[2\]\)"):
        policy.refresh(1, 1)


def test_servers_get_pushes_from_rank_0_alone_and_a_restarted_one_gets_the_served_version() -> None:
    from rllm.rollouts import ProcessGroup

    barriers: list[int] = []
    for rank in (0, 1):
        engine, weights, servers = Engine(), Recorded(), Servers()
        group = ProcessGroup(rank, 2, lambda value: [value, value], lambda rank=rank: barriers.append(rank))
        policy = PolicyVersions(engine, weights, asynchronous=False, lead=0, servers=servers, group=group)  # type: ignore[arg-type]
        state = TrainerState()
        policy.start(state)
        policy.updated(state)
        assert weights.loaded == []  # servers sample: nothing loads in process
        assert servers.pushed == ([("update", 0, None), ("update", 1, None)] if rank == 0 else [])
        assert engine.resync == policy.resync  # type: ignore[attr-defined]
        policy.resync("http://127.0.0.1:1/v1")
        assert servers.alone == [(("update", 1, None), "http://127.0.0.1:1/v1")]  # every rank answers for its own
    assert barriers == [0, 0, 1, 1]  # each push waits for every rank


def _train(make_config, run_dir: Path, steps: int) -> list[dict]:
    config = make_config(
        f"rllm.trainer.total_batches={steps}",
        "rllm.trainer.save_freq=2",
        "rllm.trainer.test_freq=0",
        "rllm.episode_logging.log_episodes=true",
        f"rllm.episode_logging.episode_log_dir={run_dir / 'episodes'}",
        f"rllm.trainer.output_dir={run_dir}",
    )
    trainer = UnifiedTrainer(None, config, progress=False)
    try:
        trainer.fit()
    finally:
        trainer.shutdown()
    return [r for r in read_metrics(run_dir / METRICS_FILE) if r["kind"] == "train"]


def test_a_resumed_synchronous_run_continues_the_policy_version_it_stopped_at(make_config, tmp_path: Path) -> None:
    first = _train(make_config, tmp_path, 4)
    updates = sum(int(r["batch/updated"]) for r in first)  # steps that updated the policy: its version
    assert updates >= 2
    saved = json.loads((tmp_path / "checkpoints" / "step_4" / "policy.json").read_text())
    assert saved["policy_version"] == updates
    _train(make_config, tmp_path, 6)
    lines = (tmp_path / "episodes" / "train" / "step_000005-000.jsonl").read_text().splitlines()
    versions = {s["weight_version"] for line in lines for t in json.loads(line)["trajectories"] for s in t["steps"]}
    assert versions == {updates}  # the resumed run's first batch samples the version it stopped at, not 0
