"""The bridge where verl meets it in real runs: a spawned worker process, and a pip-installed rllm plugin.

Neither child imports rllm or registers anything itself: importing verl finds rllm's
``verl.plugins`` entry point, which brings every installed rllm estimator along.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import rllm

ROOT = Path(__file__).resolve().parents[2]
VERL_RUN = """
import json, sys
import numpy as np, torch
from omegaconf import OmegaConf
from verl import DataProto
from verl.trainer.ppo.ray_trainer import compute_advantage

def run_in_verl(name, rewards, uids, **options):
    tokens = torch.zeros(len(rewards), 3)
    tokens[:, -1] = torch.tensor(rewards)
    data = DataProto.from_dict(
        tensors={"token_level_rewards": tokens, "response_mask": torch.ones(len(rewards), 3)},
        non_tensors={"uid": np.array(uids, dtype=object)},
    )
    config = OmegaConf.create({"adv_estimator": name, "rllm_options": options})
    return compute_advantage(data, adv_estimator=name, config=config).batch["advantages"][:, 0].tolist()
"""
SPAWNED = (
    VERL_RUN
    + """
rllm_before_run = "rllm" in sys.modules  # imported by verl's plugin discovery, not by this code
try:
    result = run_in_verl("rllm.maxrl", [1.0, 0.0, 0.0, 0.0, 1.0, 1.0], ["p", "p", "p", "p", "q", "q"])
    queue.put({"advantages": result, "rllm_loaded_by_verl": rllm_before_run})
except Exception as exc:
    queue.put({"error": f"{type(exc).__name__}: {exc}"})
"""
)


def test_the_bridge_works_in_a_spawned_process_as_in_a_ray_worker() -> None:
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=exec, args=(SPAWNED, {"queue": queue}))
    process.start()
    try:
        report = queue.get(timeout=300)
    finally:
        process.join(timeout=60)
    assert "error" not in report, report
    assert process.exitcode == 0
    assert report["rllm_loaded_by_verl"] is True
    # MaxRL: (r - mean) / (mean + eps); group p has mean 0.25: 0.75 / 0.25 = 3, -0.25 / 0.25 = -1;
    # group q has no spread: 0
    assert report["advantages"] == pytest.approx([3.0, -1.0, -1.0, -1.0, 0.0, 0.0], abs=1e-4)
    expected = rllm.compute_advantages("maxrl", [1.0, 0.0, 0.0, 0.0, 1.0, 1.0], list("ppppqq"))
    np.testing.assert_allclose(report["advantages"], expected, atol=1e-6)


@pytest.mark.slow
def test_an_installed_rllm_plugins_estimator_runs_in_verl_by_name(tmp_path: Path) -> None:
    target = tmp_path / "site"
    install = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps"]
    done = subprocess.run(
        [*install, "--no-build-isolation", "--target", str(target), str(ROOT / "plugins" / "example")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    code = (
        VERL_RUN
        + """
print(json.dumps({
    "plain": run_in_verl("rllm.scaled_median", [1.0, 0.0, 0.0, 0.0], ["a"] * 4, preset="verl"),
    "clipped": run_in_verl("rllm.scaled_median", [1.0, 0.0, 0.0, 0.0], ["a"] * 4, preset="verl", clip=1.5),
}))
"""
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    # median 0, verl's unbiased std 0.5 plus eps 1e-6: 1 / 0.500001 = 1.999996; the rest 0
    assert report["plain"] == pytest.approx([1.999996, 0.0, 0.0, 0.0], abs=1e-5)
    assert report["clipped"] == pytest.approx([1.5, 0.0, 0.0, 0.0], abs=1e-6)


@pytest.mark.slow
def test_an_installed_plugins_loss_runs_in_verl_by_name(tmp_path: Path) -> None:
    """A pip-installed third-party loss is found by verl's own ``get_policy_loss_fn``, under its name and alias."""
    target = tmp_path / "site"
    install = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps"]
    fixture = ROOT / "tests" / "fixtures" / "plugins" / "losses"
    done = subprocess.run(
        [*install, "--no-build-isolation", "--target", str(target), str(fixture)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    code = """
import json, sys
import torch
from omegaconf import OmegaConf
import verl  # its plugin discovery registers rllm's losses in verl's registry
from verl.trainer.ppo.core_algos import get_policy_loss_fn

imported_before = "rllm_fixture_losses.loss" in sys.modules
log_prob = torch.tensor([[-1.0, -2.0, -0.5]], requires_grad=True)
args = (torch.zeros(1, 3), log_prob, torch.tensor([[1.0, -1.0, 2.0]]), torch.tensor([[1.0, 1.0, 0.0]]), "token-mean")
loss, metrics = get_policy_loss_fn("rllm.scaled_pg")(*args, OmegaConf.create({"policy_loss": {"scale": 3.0}}))
loss.backward()
alias, _ = get_policy_loss_fn("rllm.fixture_pg")(*args, OmegaConf.create({}))
print(json.dumps({"before": imported_before, "loss": float(loss), "grad": log_prob.grad.tolist(),
                  "metrics": metrics, "alias": float(alias)}))
"""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("RLLM_")},
        "PYTHONPATH": os.pathsep.join([str(target), os.environ.get("PYTHONPATH", "")]),
    }
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["before"] is False  # registered by name; its module is imported only when the loss runs
    # masked tokens 1 and 2: -(-1 * 1) - (-2 * -1) = -1, over 2 tokens = -0.5, times scale 3 = -1.5
    assert report["loss"] == pytest.approx(-1.5)
    # d/dlogp of -scale * A * mask / 2: -3 * [1, -1, 2] * [1, 1, 0] / 2
    assert report["grad"][0] == pytest.approx([-1.5, 1.5, 0.0])
    assert report["metrics"] == {"actor/tokens": 2.0}
    assert report["alias"] == pytest.approx(-0.5)  # the alias with the option's default scale 1.0
