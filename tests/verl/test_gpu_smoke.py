"""``bench/verl_gpu_smoke.py``: one line and exit 0 where there is no CUDA device, and the same steps on the CPU
(``--device cpu``) printing every figure."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from extras import skip_module_without

skip_module_without("torch", "transformers", install="pip install 'rllm[verl,transformers]' (CI does)")

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "bench" / "verl_gpu_smoke.py"
NO_GPU = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
"""No GPU visible to torch, on any machine."""


def test_without_cuda_the_smoke_says_so_in_one_line_and_exits_0() -> None:
    done = subprocess.run([sys.executable, str(SMOKE)], capture_output=True, text=True, env=NO_GPU, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == [
        "verl GPU smoke: skipped, torch sees no CUDA device (or this torch is a CPU build); --device cpu runs the "
        "same steps here."
    ], done.stdout
    assert "Traceback" not in done.stderr, done.stderr


@pytest.mark.slow
def test_the_smoke_on_the_cpu_prints_each_steps_figures() -> None:
    """2 steps at a vocabulary of 4096 rows (the 151,936 of a GPU run is the same code, slower here)."""
    command = [sys.executable, str(SMOKE), "--device", "cpu", "--vocab", "4096", "--steps", "2", "--tasks", "4"]
    done = subprocess.run(command, capture_output=True, text=True, env=NO_GPU, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert [line.split(":")[0] for line in lines[1:3]] == ["step 1", "step 2"], lines
    figures = json.loads(lines[-1])
    assert figures["device"] == "cpu" and figures["vocab"] == 4096
    assert figures["perf/rollout_tokens_per_s"] > 0 and figures["perf/update_tokens_per_s"] > 0
    assert 0.0 <= figures["batch/reward"] <= 1.0
