"""The transformers backend on Ray workers: the rollouts of a task differ, and equal the local executor's.

Two steps of the tiny model, so the second step's episodes show the updated weights reached
the workers.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from extras import skip_module_without

skip_module_without(
    "ray", "torch", "transformers", "safetensors", install="pip install 'rllm[ray,transformers]' (CI does)"
)

from rllm.config import load_config
from rllm.trainer import UnifiedTrainer
from rllm.trainer.logging import METRICS_FILE, read_metrics

RUN = (
    "rllm.backend=transformers",
    "rllm.transformers.device=cpu",
    "rllm.trainer.logger=[jsonl]",
    "rllm.data.train_batch_size=4",
    "rllm.rollout.n=8",
    "rllm.trainer.total_batches=2",
    "rllm.trainer.test_freq=0",
    "rllm.trainer.val_before_train=false",
    "rllm.episode_logging.log_episodes=true",
)


def _run(directory: Path, *overrides: str) -> tuple[dict[str, list[list[int]]], list[dict]]:
    """The episodes' response ids by episode id (both steps), and the train metrics."""
    config = load_config(overrides=[*RUN, f"rllm.trainer.output_dir={directory}", *overrides])
    trainer = UnifiedTrainer(None, config, progress=False)
    try:
        trainer.fit()
    finally:
        trainer.shutdown()
    episodes: dict[str, list[list[int]]] = {}
    for path in sorted((directory / "episodes" / "train").glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            steps = [s["response_ids"] for t in record["trajectories"] for s in t["steps"]]
            episodes[f"{path.stem}/{record['id']}"] = steps
    return episodes, [r for r in read_metrics(directory / METRICS_FILE) if r["kind"] == "train"]


def test_ray_workers_sample_the_local_executors_episodes(tmp_path: Path) -> None:
    remote, remote_metrics = _run(tmp_path / "ray", "rllm.workflow.executor=ray", "rllm.workflow.ray.num_workers=2")
    local, _ = _run(tmp_path / "local")
    assert len(remote) == 2 * 4 * 8
    groups: dict[str, set[str]] = defaultdict(set)
    for episode_id, steps in remote.items():
        groups[episode_id.rsplit(":", 1)[0]].add(str(steps))
    assert all(len(responses) > 1 for responses in groups.values()), groups  # no group of identical rollouts
    assert remote == local
    assert all(r["advantage/solver/std"] > 0 for r in remote_metrics)
    assert all(r["perf/rollout_tokens_per_s"] > 0 for r in remote_metrics)  # the workers' tokens are counted
