"""Plugins inside Ray workers: entry-point plugins resolve there by name; a name registered at run time
in the driver only fails there, saying how to make it available.

The plugin distributions (the example estimators, the fixture trainer plugin with its workflow) are
pip-installed into a directory that the driver and the workers put on their path, so the workers
discover them through their entry points as any installed plugin.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from extras import skip_module_without

skip_module_without("ray", install="pip install 'rllm[ray]' (CI does)")

import ray

from rllm.errors import WorkflowError
from rllm.experimental.common.advantage import register_rllm_adv_estimator
from rllm.trainer.engine import WorkflowEngine
from rllm.trainer.ray_executor import RayExecutor, start_local_ray
from rllm.types import Episode

ROOT = Path(__file__).resolve().parents[2]
DISTRIBUTIONS = [ROOT / "plugins" / "example", ROOT / "tests" / "fixtures" / "plugins" / "trainer"]

pytestmark = pytest.mark.slow  # a pip install and a Ray instance of its own


@pytest.fixture(scope="module")
def plugins_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    target = tmp_path_factory.mktemp("worker_plugins")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-deps",
            "--target",
            str(target),
            *map(str, DISTRIBUTIONS),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    sys.path.insert(0, str(target))  # the driver imports the workflow class; it never loads these plugins
    start_local_ray(num_cpus=2, runtime_env={"env_vars": {"PYTHONPATH": str(target)}})
    try:
        yield target
    finally:
        ray.shutdown()
        sys.path.remove(str(target))


def _run(tasks: list[dict], **options: object) -> tuple[list[Episode], WorkflowEngine]:
    from rllm_fixture_trainer.workflow import EstimatorWorkflow

    engine = WorkflowEngine(EstimatorWorkflow, executor=RayExecutor(2), **options)  # type: ignore[arg-type]

    async def go() -> list[Episode]:
        try:
            return await engine.execute_tasks(tasks, [f"q{i}" for i in range(len(tasks))])
        finally:
            engine.shutdown()

    return asyncio.run(go()), engine


def test_a_plugins_workflow_uses_an_entry_point_estimator_in_the_workers(plugins_dir: Path) -> None:
    tasks = [{"estimator": "median_baseline", "rewards": [3.0, 1.0, 0.0, 0.0]}] * 4
    episodes, _ = _run(tasks)
    for episode in episodes:  # each reward minus the group's median, 0.5
        assert episode.metrics["advantages"] == [2.5, 0.5, -0.5, -0.5]
    assert os.getpid() not in {ep.metrics["pid"] for ep in episodes}


def test_a_name_registered_only_in_the_driver_fails_in_the_worker_saying_how_to_publish_it(
    plugins_dir: Path, plugin_manager: object
) -> None:
    @register_rllm_adv_estimator("driver_only")
    def driver_only(rewards: list[np.ndarray], **kwargs: object) -> tuple[list[np.ndarray], list[np.ndarray]]:
        return rewards, rewards

    tasks = [{"estimator": "driver_only", "rewards": [1.0, 0.0]}]
    with pytest.raises(WorkflowError) as caught:
        _run(tasks, failure_policy="fail")
    message = str(caught.value)
    assert "'driver_only'" in message and "EstimatorNotFoundError" in message
    assert "registered at run time in the driver" in message and "'rllm.estimators' entry-point group" in message
