"""``bench/gpu.py --tiny``: the GPU check's code runs on the CPU and prints every figure, with ratios that are the
figures' own quotients and an update at lr 1e-6 that moves (nearly) every float32 master weight."""

from __future__ import annotations

import json
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
