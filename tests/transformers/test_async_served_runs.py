"""Asynchronous training with rollouts from an ``rllm serve`` subprocess: the servers sample the next batch while the
trainer updates, and take each batch's weights through the weight sync before it samples."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from extras import skip_module_without
from serving import SERVED, SERVED_RUN, get_json, running, step_versions

skip_module_without("torch", "transformers", "safetensors", "fastapi", "uvicorn", install="pip install 'rllm[serve]'")

from rllm.trainer import UnifiedTrainer
from rllm.trainer.logging import METRICS_FILE, read_metrics

pytestmark = pytest.mark.slow

STALE = (
    "rllm.async_training.enable=true",
    "rllm.async_training.staleness_threshold=1",
    "rllm.algorithm.rollout_correction.tis_mode=token",
)
NOISE = "actor/rollout_logprob_diff"
"""The trainer's log-probs minus the server's: float noise of the order of 1e-7 that depends on which requests the
server happened to batch together, so it differs between two synchronous runs too."""


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with running(*SERVED) as root:
        yield root


def _fit(run_dir: Path, *overrides: str) -> list[dict]:
    from rllm.config import load_config

    config = load_config(overrides=[*SERVED_RUN, *overrides, f"rllm.trainer.output_dir={run_dir}"])
    trainer = UnifiedTrainer(None, config, progress=False)
    try:
        trainer.fit()
    finally:
        trainer.shutdown()
    return read_metrics(run_dir / METRICS_FILE)


def test_staleness_1_through_a_server_overlaps_carries_its_versions_and_learns(server: str, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    records = _fit(
        run_dir,
        *STALE,
        f"rllm.rollout.openai.base_url=[{server}/v1]",
        "rllm.trainer.total_batches=12",
        "rllm.trainer.test_freq=12",
        "rllm.episode_logging.log_episodes=true",
    )
    trained = [r for r in records if r["kind"] == "train"]
    # batch u samples the weights trained up to step u - 2 (policy version u - 2; the first two, the initial ones)
    assert step_versions(run_dir) == {u: {max(0, u - 2)} for u in range(1, 13)}
    assert [r["rollout/staleness/max"] for r in trained] == [0.0] + [1.0] * 11  # the bound, reached
    # every episode after the first batch one version behind: 6 batches of 16 tasks and one of 4 per epoch, x 8
    assert [r["rollout/staleness/count_1"] for r in trained[1:]] == [128.0] * 5 + [32.0] + [128.0] * 5
    assert get_json(f"{server}/health")["weight_version"] == 12  # the final validation's, the newest weights
    passes = [r["val/digit_max/pass@1"] for r in records if r["kind"] == "val"]
    assert len(passes) == 2 and passes[-1] >= passes[0] + 0.3, passes


def test_staleness_0_through_a_server_gives_the_synchronous_runs_metrics(server: str, tmp_path: Path) -> None:
    shared = (
        f"rllm.rollout.openai.base_url=[{server}/v1]",
        "rllm.rollout.openai.weight_sync=memory",
        "rllm.trainer.total_batches=3",
        "rllm.trainer.test_freq=3",
    )
    sync = _fit(tmp_path / "sync", *shared)
    overlapped = _fit(tmp_path / "async", *shared, "rllm.async_training.enable=true")

    def numbers(records: list[dict]) -> list[dict]:
        skipped = ("time/", "perf/", "async/")
        return [
            {k: v for k, v in r.items() if k not in ("wall_time", NOISE) and not k.startswith(skipped)} for r in records
        ]

    assert [r["kind"] for r in sync] == ["val", "train", "train", "train", "val"]
    assert numbers(overlapped) == numbers(sync)
    for ours, theirs in zip(overlapped, sync, strict=True):
        assert ours.get(NOISE, 0.0) == pytest.approx(theirs.get(NOISE, 0.0), abs=1e-6)
    assert [r["rollout/staleness/max"] for r in overlapped if r["kind"] == "train"] == [0.0] * 3
