"""What the learning benchmarks print of a run: wall time, seconds per step and the validation curve."""

from __future__ import annotations

import statistics
from typing import Any

TARGET = 0.9
"""Validation pass@1 the learning benchmarks are asked to reach."""


def report_curve(title: str, wall: float, records: list[dict[str, Any]], metric: str) -> list[tuple[int, float]]:
    """Print the run's lines under ``title``; the curve ``[(step, pass@1)]`` of ``metric``.

    ``wall`` is the whole benchmark's seconds. The time to the target is counted from the
    benchmark's start, at most: every second outside the run's records (a warm start, set-up, the
    final checkpoint) is counted before it.
    """
    validations = [r for r in records if r["kind"] == "val"]
    curve = [(r["step"], r[metric]) for r in validations]
    step_times = [r["time/step"] for r in records if r["kind"] == "train" and r["step"] > 1]
    first = next((r for r in validations if r[metric] >= TARGET), None)
    outside = wall - max(r["wall_time"] for r in records)
    reached = "not reached" if first is None else f"step {first['step']}, <= {outside + first['wall_time']:.0f} s in"
    print(title)
    print(f"   wall time {wall:.1f} s, {statistics.median(step_times):.2f} s per step (median)")
    last = curve[-1]
    print(f"   val pass@1 {curve[0][1]:.2f} at step 0 -> {last[1]:.2f} at step {last[0]}; first >= {TARGET}: {reached}")
    print("   curve: " + ", ".join(f"{step}:{value:.2f}" for step, value in curve))
    return curve
