"""Stateful estimators: ema_baseline by hand, the state contract, and the state in checkpoints."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import rllm
from rllm.errors import EstimatorOptionError
from rllm.estimators.collect import collect_advantages
from rllm.toolkit import EstimatorStates, stateful
from rllm.trainer.checkpoint import MANIFEST, SAMPLING_FILE
from rllm.trainer.unified import UnifiedTrainer
from rllm.types import Trajectory, TrajectoryGroup


def _groups(rewards: dict[str, list[float]]) -> list[TrajectoryGroup]:
    return [
        TrajectoryGroup.for_task(task, "solver", [Trajectory(name="solver", reward=r) for r in values])
        for task, values in rewards.items()
    ]


def test_ema_baseline_by_hand_across_steps() -> None:
    config = rllm.AlgorithmConfig(estimator="ema_baseline", estimator_options={"decay": 0.5})
    states = EstimatorStates()
    first = collect_advantages(_groups({"a": [1.0, 0.0], "b": [1.0, 1.0]}), config, states=states)
    # first sight of a task: its baseline is this batch's mean (a: 0.5, b: 1.0)
    assert first.roles["solver"].advantages.tolist() == [0.5, -0.5, 0.0, 0.0]
    assert states.state_dict() == {"ema_baseline": {"solver": {"baselines": {"a": 0.5, "b": 1.0}}}}
    second = collect_advantages(_groups({"a": [1.0, 1.0], "c": [0.0, 0.5]}), config, states=states)
    # a: reward - 0.5, then baseline 0.5*0.5 + 0.5*1.0 = 0.75; c: new, baseline 0.25
    assert second.roles["solver"].advantages.tolist() == [0.5, 0.5, -0.25, 0.25]
    assert states.state_dict()["ema_baseline"]["solver"]["baselines"] == {"a": 0.75, "b": 1.0, "c": 0.25}


def test_ema_baseline_per_role_and_its_options() -> None:
    by_role = rllm.compute_advantages("ema_baseline", [1.0, 0.0, 1.0, 1.0], [0, 0, 1, 1], key="role")
    assert by_role.tolist() == [0.25, -0.75, 0.25, 0.25]  # one baseline, the batch mean 0.75
    by_group = rllm.compute_advantages("ema_baseline", [1.0, 0.0, 1.0, 1.0], ["a", "a", "b", "b"])
    assert by_group.tolist() == [0.5, -0.5, 0.0, 0.0]  # without task_ids, each group label is a task
    with pytest.raises(EstimatorOptionError, match=r"'decay' of estimator 'ema_baseline' must be in \[0, 1\)"):
        rllm.compute_advantages("ema_baseline", [1.0, 0.0], [0, 0], task_ids=["a", "a"], decay=1.0)
    with pytest.raises(EstimatorOptionError, match="key"):
        rllm.compute_advantages("ema_baseline", [1.0, 0.0], [0, 0], key="episode")


def test_a_call_without_states_starts_afresh_and_restored_states_continue() -> None:
    config = rllm.AlgorithmConfig(estimator="ema_baseline", estimator_options={"decay": 0.5})
    for _ in range(2):  # no EstimatorStates: each call is a first step
        fresh = collect_advantages(_groups({"a": [1.0, 0.0]}), config)
        assert fresh.roles["solver"].advantages.tolist() == [0.5, -0.5]
    saved = {"ema_baseline": {"solver": {"baselines": {"a": 0.25}}}}
    states = EstimatorStates()
    states.load_state_dict(json.loads(json.dumps(saved)))
    assert states.state_dict() == saved  # restored, not yet used: still saved as it was
    resumed = collect_advantages(_groups({"a": [1.0, 0.0]}), config, states=states)
    assert resumed.roles["solver"].advantages.tolist() == [0.75, -0.25]


def test_a_state_that_is_not_a_state_object_is_refused() -> None:
    @stateful(lambda: object())  # type: ignore[arg-type, return-value]
    def broken(batch, *, state):  # type: ignore[no-untyped-def]
        return np.zeros(len(batch.rewards))

    with pytest.raises(EstimatorOptionError, match=r"'broken' is marked stateful.*lacks state_dict"):
        EstimatorStates().get("broken", broken, "solver")


def test_checkpoints_hold_the_estimator_state_and_version_1_checkpoints_still_resume(make_config) -> None:
    args = ("rllm.algorithm.adv_estimator=ema_baseline", "rllm.trainer.test_freq=0", "rllm.trainer.save_freq=2")
    trainer = UnifiedTrainer(None, make_config(*args, "rllm.trainer.total_batches=2"), progress=False)
    trainer.fit()
    trainer.shutdown()
    step = Path(trainer.output_dir) / "checkpoints" / "step_2"
    saved = json.loads((step / "estimators.json").read_text())
    baselines = saved["ema_baseline"]["solver"]["baselines"]
    assert len(baselines) == 40 and all(0.0 <= b <= 1.0 for b in baselines.values())  # two batches of 20 tasks
    # rewrite it as a version 1 checkpoint (no estimator or sampling state): it resumes with fresh ones
    manifest = json.loads((step / MANIFEST).read_text())
    for name in ("estimators.json", SAMPLING_FILE):
        (step / name).unlink()
        del manifest["files"][name]
    (step / MANIFEST).write_text(json.dumps({**manifest, "version": 1}))
    longer = UnifiedTrainer(None, make_config(*args, "rllm.trainer.total_batches=3"), progress=False)
    longer.fit()
    longer.shutdown()
    resumed = json.loads((Path(longer.output_dir) / "checkpoints" / "step_3" / "estimators.json").read_text())
    assert len(resumed["ema_baseline"]["solver"]["baselines"]) == 20  # only step 3's tasks: it started afresh


def test_an_estimator_state_of_the_wrong_shape_makes_the_checkpoint_unusable(make_config) -> None:
    import hashlib

    from rllm.errors import CorruptCheckpointError

    args = ("rllm.algorithm.adv_estimator=ema_baseline", "rllm.trainer.test_freq=0", "rllm.trainer.total_batches=1")
    trainer = UnifiedTrainer(None, make_config(*args), progress=False)
    trainer.fit()
    trainer.shutdown()
    step = Path(trainer.output_dir) / "checkpoints" / "step_1"
    data = b"[1, 2]"  # JSON, listed in a consistent manifest, but not {estimator: {role: state}}
    (step / "estimators.json").write_bytes(data)
    manifest = json.loads((step / MANIFEST).read_text())
    manifest["files"]["estimators.json"] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (step / MANIFEST).write_text(json.dumps(manifest))
    again = UnifiedTrainer(None, make_config(*args[:2], "rllm.trainer.total_batches=2"), progress=False)
    with pytest.raises(CorruptCheckpointError, match=r"step_1' holds data this rllm cannot read.*Estimator states"):
        again.fit()
    again.shutdown()
