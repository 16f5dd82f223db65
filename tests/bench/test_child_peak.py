"""The benchmarks charge a child process its own peak memory, not the harness's size at fork."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="reads VmHWM from /proc (Linux)")
def test_a_small_child_of_a_large_harness_reports_its_own_peak(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(BENCH))
    from jsonl import _timed

    ballast = bytearray(400 * 1024 * 1024)
    ballast[::4096] = b"\1" * len(ballast[::4096])  # resident: 400 MB in the harness
    _, loop_mb = _timed([sys.executable, "-c", "import sys; assert sys.argv[1:] == ['a', 'b']", "a", "b"])
    _, module_mb = _timed([sys.executable, "-m", "json.tool", "--help"])
    _, big_mb = _timed([sys.executable, "-c", "x = bytearray(200 * 1024 * 1024); x[::4096] = b'1' * len(x[::4096])"])
    del ballast
    assert loop_mb < 100 and module_mb < 100, (loop_mb, module_mb)  # an interpreter: ~10-20 MB, not 400+
    assert 200 < big_mb < 300, big_mb  # and a child's own 200 MB is counted
