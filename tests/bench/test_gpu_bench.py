"""``bench/gpu.py --tiny``: the GPU check's code runs on the CPU and prints every figure, with ratios that are the
figures' own quotients and an update at lr 1e-6 that moves (nearly) every float32 master weight."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from extras import skip_module_without

skip_module_without("torch", "transformers", "trl", install="pip install 'rllm[transformers]' trl")

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def test_the_tiny_gpu_check_prints_every_figure_and_its_ratios() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "gpu.py"), "--tiny", "--device", "cpu"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    figures = json.loads(lines[-1])
    assert figures["shape"] == "tiny" and figures["device"] == "cpu"
    for side in ("rllm", "trl"):
        for kind in ("sampling", "update"):
            assert figures[f"{side}_{kind}_tokens_per_s"] > 0
        assert figures[f"{side}_peak_gib"] is None  # torch.cuda's counter: none on the CPU
        # fp32 master weights: Adam's first step moves each weight by about lr, far above float32's rounding
        assert figures[f"{side}_weights_changed"] >= 0.99
    for kind in ("sampling", "update"):
        expected = figures[f"rllm_{kind}_tokens_per_s"] / figures[f"trl_{kind}_tokens_per_s"]
        assert figures[f"{kind}_ratio"] == pytest.approx(expected)
    assert figures["peak_ratio"] is None
    assert any(line.startswith("  rllm / TRL: sampling ") for line in lines), done.stdout
    assert "vocabulary 151,936" in lines[0]


def test_the_device_script_runs_the_check_from_the_carried_wheels(tmp_path: Path) -> None:
    """``bench/gpu_device.sh`` as the device tool runs it, on the CPU: the wheels installed into a folder of their own
    (here a wheel of this checkout, built offline), rllm imported from there, the check's figures on stdout and in
    ``$OUT/gpu.txt``."""
    wheels, site, out = tmp_path / "whl", tmp_path / "site", tmp_path / "out"
    out.mkdir()
    build = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(wheels)]
    built = subprocess.run([*build, str(ROOT)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-3000:]
    env = {
        **os.environ,
        "GPU_PYTHON": sys.executable,
        "GPU_SITE": str(site),
        "GPU_WHEELS": str(wheels),
        "OUT": str(out),
        "GPU_ARGS": "--tiny --device cpu",
    }
    done = subprocess.run(
        ["bash", str(ROOT / "bench" / "gpu_device.sh")], capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    lines = done.stdout.strip().splitlines()
    assert lines[0].startswith("versions: rllm ") and ", trl " in lines[0]
    assert lines[1] == f"rllm from: {site / 'rllm' / '__init__.py'}"  # the carried wheel, not this checkout
    figures = json.loads(lines[-1])
    assert figures["shape"] == "tiny" and figures["rllm_update_tokens_per_s"] > 0
    assert (out / "gpu.txt").read_text().strip().splitlines() == lines


def test_the_device_script_says_what_to_do_without_wheels(tmp_path: Path) -> None:
    env = {**os.environ, "GPU_WHEELS": str(tmp_path), "OUT": str(tmp_path)}
    done = subprocess.run(["bash", str(ROOT / "bench" / "gpu_device.sh")], capture_output=True, text=True, env=env)
    assert done.returncode == 2
    assert done.stdout.strip() == f"no wheels in {tmp_path}/: run bench/gpu_wheels.sh here, carry .whl"
