"""``rllm advantages`` on a large JSON Lines file against a plain standard-library loop.

The loop parses and re-serialises every line of the same file (``json.loads`` then
``json.dumps``), the least any tool that adds a field must do. Both run as separate
processes (interpreter start-up included in both), alternately, and the time ratio is the
median of the paired runs; peak memory is each process's own maximum resident set size
(``VmHWM`` read in the child, not the harness's size that a child's ``ru_maxrss`` starts from).
Targets for a 100 MB file: within 2x the loop's time, under 300 MB.

Run ``python bench/jsonl.py`` (100 MB) or ``python bench/jsonl.py --size-mb 10``; the
benchmark driver calls :func:`jsonl_benchmark`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LOOP = """
import json, sys
with open(sys.argv[1], encoding="utf-8") as src, open(sys.argv[2], "w", encoding="utf-8") as out:
    for line in src:
        record = json.loads(line)
        record["advantage"] = 0.0
        out.write(json.dumps(record) + "\\n")
"""


def make_file(path: Path, size_mb: float, seed: int = 0) -> int:
    """Rollouts in groups of 8 with text fields, about ``size_mb`` MB; returns the number of lines."""
    rng = random.Random(seed)
    words = ["step", "answer", "therefore", "sum", "digit", "carry", "check", "result", "so", "the"]
    target = int(size_mb * 1e6)
    written = lines = 0
    with path.open("w", encoding="utf-8") as out:
        while written < target:
            response = " ".join(rng.choice(words) for _ in range(rng.randint(40, 90)))
            record = {
                "group_id": f"task-{lines // 8}",
                "role": "solver",
                "reward": float(rng.random() < 0.4),
                "response_length": len(response.split()),
                "prompt": f"What is the sum of the digits of {rng.randint(10**8, 10**9)}?",
                "response": response,
            }
            line = json.dumps(record) + "\n"
            out.write(line)
            written += len(line)
            lines += 1
    return lines


MEASURED = """
import atexit, re, runpy, sys
report = sys.argv.pop(1)
def _peak():
    with open('/proc/self/status') as status:
        kib = re.search(r'VmHWM:\\s+(\\d+)', status.read()).group(1)
    with open(report, 'w') as out:
        out.write(kib)
atexit.register(_peak)
if sys.argv[1] == '-m':
    sys.argv[:3] = [sys.argv[2]]
    runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)
else:
    code = sys.argv[2]
    sys.argv[:3] = ['-c']
    exec(compile(code, '<string>', 'exec'), {'__name__': '__main__'})
"""
"""Runs ``python -m MODULE ...`` or ``python -c CODE ...`` and writes the process's own peak (VmHWM, KiB) at exit.

A child's ``ru_maxrss`` (``wait4``, ``RUSAGE_CHILDREN``) starts from the parent's resident size
at fork, so a benchmark harness holding 1.6 GB would charge that to a child using 100 MB; the
``VmHWM`` of the process image after ``exec`` is the child's alone."""


def _timed(command: list[str]) -> tuple[float, float]:
    """Wall seconds and peak resident memory (MB) of one child process (``command``: python -m or -c)."""
    with tempfile.TemporaryDirectory(prefix="rllm-peak-") as folder:
        report = Path(folder) / "peak"
        own = Path("/proc/self/status").is_file()
        measured = [command[0], "-c", MEASURED, str(report), *command[1:]] if own else command
        started = time.perf_counter()
        process = subprocess.Popen(measured, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(process.pid, 0)
        elapsed = time.perf_counter() - started
        process.returncode = os.waitstatus_to_exitcode(status)
        if process.returncode != 0:
            raise RuntimeError(f"{command[:4]} failed: {process.stderr.read().decode() if process.stderr else ''}")
        if own:
            return elapsed, int(report.read_text()) / 1024
    return elapsed, usage.ru_maxrss / 1024  # elsewhere: wait4's figure, which includes the parent's size at fork


def jsonl_benchmark(size_mb: float = 100.0, rounds: int = 3, estimator: str = "grpo") -> dict[str, float]:
    """Print and return the JSON Lines row: time ratio to the stdlib loop and peak memory of both."""
    with tempfile.TemporaryDirectory(prefix="rllm-bench-") as folder:
        source, out = Path(folder) / "rollouts.jsonl", Path(folder) / "out.jsonl"
        n_lines = make_file(source, size_mb)
        loop = [sys.executable, "-c", LOOP, str(source), str(out)]
        ours = [sys.executable, "-m", "rllm.cli.main", "advantages", str(source), "-e", estimator, "-o", str(out)]
        ratios, loop_times, our_times, loop_peak, our_peak = [], [], [], 0.0, 0.0
        for _ in range(rounds):
            loop_time, loop_mb = _timed(loop)
            our_time, our_mb = _timed(ours)
            ratios.append(our_time / loop_time)
            loop_times.append(loop_time)
            our_times.append(our_time)
            loop_peak, our_peak = max(loop_peak, loop_mb), max(our_peak, our_mb)
        real_mb = source.stat().st_size / 1e6
    row = {
        "size_mb": real_mb,
        "lines": float(n_lines),
        "loop_s": min(loop_times),
        "rllm_s": min(our_times),
        "time_ratio": statistics.median(ratios),
        "loop_peak_mb": loop_peak,
        "rllm_peak_mb": our_peak,
    }
    print(f"\n## JSON Lines: rllm advantages -e {estimator} on {real_mb:.0f} MB ({n_lines:,} lines)")
    print("loop = a stdlib loop that parses and re-serialises every line (json.loads, json.dumps)")
    print(f"loop: {row['loop_s']:.2f} s, peak {loop_peak:.0f} MB; rllm: {row['rllm_s']:.2f} s, peak {our_peak:.0f} MB")
    print(f"rllm / loop time: {row['time_ratio']:.2f}x (median of {rounds} paired runs; target <= 2x, < 300 MB)")
    return row


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=float, default=100.0)
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    jsonl_benchmark(options.size_mb, options.rounds)
