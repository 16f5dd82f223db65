"""``-o`` onto regular files, symlinks, FIFOs and device nodes, write failures and signals (real files)."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from rllm.cli.main import main

LINES = '{"task_id": "q", "reward": 3}\n{"task_id": "q", "reward": 1}\n'
EXPECTED = '{"task_id": "q", "reward": 3, "advantage": 2.0}\n{"task_id": "q", "reward": 1, "advantage": -2.0}\n'


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "in.jsonl"
    path.write_text(LINES)
    return path


def run(source: Path, output: Path | str) -> int:
    return main(["advantages", str(source), "-e", "rloo", "-o", str(output)])


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_regular_file_is_replaced_keeping_its_mode(source: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    out.write_text("old\n")
    out.chmod(0o640)
    assert run(source, out) == 0
    assert out.read_text() == EXPECTED
    assert stat.S_IMODE(out.stat().st_mode) == 0o640
    assert leftovers(tmp_path) == []


def test_new_file_gets_the_umask_mode_and_parent_folders(source: Path, tmp_path: Path) -> None:
    out = tmp_path / "new" / "folder" / "out.jsonl"
    old = os.umask(0o022)
    try:
        assert run(source, out) == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE(out.stat().st_mode) == 0o644 and out.read_text() == EXPECTED


def test_symlink_target_is_written_and_the_link_kept(source: Path, tmp_path: Path) -> None:
    target = tmp_path / "data" / "real.jsonl"
    target.parent.mkdir()
    target.write_text("old\n")
    link = tmp_path / "link.jsonl"
    link.symlink_to(target)
    assert run(source, link) == 0
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text() == EXPECTED
    assert leftovers(target.parent) == [] and leftovers(tmp_path) == []


def test_fifo_reader_receives_the_stream(source: Path, tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received: list[str] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_text()))
    reader.start()
    assert run(source, fifo) == 0
    reader.join(timeout=10)
    assert received == [EXPECTED]
    assert stat.S_ISFIFO(fifo.lstat().st_mode)


def _mknod(path: Path, minor: int) -> None:
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, minor))
    except PermissionError:
        pytest.skip("creating a device node needs CAP_MKNOD, which this user lacks")


def test_device_node_is_streamed_to_and_stays_a_device(source: Path, tmp_path: Path) -> None:
    null = tmp_path / "null"
    _mknod(null, 3)  # like /dev/null, but inside the temp dir
    assert run(source, null) == 0
    assert stat.S_ISCHR(null.lstat().st_mode)


def test_full_device_is_a_one_line_error(source: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    full = tmp_path / "full"
    _mknod(full, 7)  # like /dev/full: every write fails with ENOSPC
    assert run(source, full) == 2
    err = capsys.readouterr().err
    assert err == (f"rllm advantages: error: Could not write {str(full)!r}: No space left on device.\n")


def test_an_estimator_calling_sys_exit_is_a_failure_and_writes_nothing(
    source: Path, tmp_path: Path, plugin_manager: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    import rllm

    rllm.register_rllm_adv_estimator("leaving", style="batch", options=())(lambda batch: sys.exit(0))
    out = tmp_path / "out.jsonl"
    assert main(["advantages", str(source), "-e", "leaving", "-o", str(out)]) != 0
    assert not out.exists() and not leftovers(tmp_path)
    err = capsys.readouterr().err
    assert "Estimator 'leaving'" in err and "sys.exit(0)" in err and len(err.splitlines()) == 1


def test_output_under_a_file_is_a_one_line_error(
    source: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "results"
    blocker.write_text("a file, not a folder\n")
    assert run(source, blocker / "out.jsonl") == 2
    err = capsys.readouterr().err
    target = str(blocker / "out.jsonl")
    assert err.splitlines() == [
        f"rllm advantages: error: Cannot write {target!r}: a part of the path is a file, not a folder."
    ]
    assert blocker.read_text() == "a file, not a folder\n"


def test_output_onto_a_folder_is_refused(source: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(source, tmp_path) == 2
    assert "it is a folder; give a file name." in capsys.readouterr().err


def test_dash_streams_to_stdout(source: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(source, "-") == 0
    out, err = capsys.readouterr()
    assert out == EXPECTED and "2 rollouts in 1 group," in err


def test_sigterm_while_writing_removes_the_temp_file_and_keeps_the_old_content(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    out.write_text("previous\n")
    script = (
        "import os, signal, sys\n"
        "from rllm.io import open_output\n"
        f"with open_output({str(out)!r}) as sink:\n"
        "    sink.write(b'partial')\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    sink.write(b'never')\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert result.returncode == 128 + signal.SIGTERM, result.stderr
    assert out.read_text() == "previous\n"
    assert leftovers(tmp_path) == []


def test_error_inside_the_block_keeps_the_old_content(tmp_path: Path) -> None:
    from rllm.io import open_output

    out = tmp_path / "out.jsonl"
    out.write_text("previous\n")
    with pytest.raises(RuntimeError), open_output(out) as sink:
        sink.write(b"partial")
        raise RuntimeError("boom")
    assert out.read_text() == "previous\n" and leftovers(tmp_path) == []


def test_results_are_valid_json_lines(source: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    assert run(source, out) == 0
    assert [json.loads(line)["advantage"] for line in out.read_text().splitlines()] == [2.0, -2.0]


def test_sigterm_while_reading_stdin_removes_its_copy(tmp_path: Path) -> None:
    spool_dir = tmp_path / "tmp"
    spool_dir.mkdir()
    process = subprocess.Popen(
        [sys.executable, "-m", "rllm.cli.main", "advantages", "-", "-o", str(tmp_path / "out.jsonl")],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "TMPDIR": str(spool_dir)},
    )
    assert process.stdin is not None
    process.stdin.write(LINES.encode())
    process.stdin.flush()  # stdin stays open: rllm is copying it when the signal arrives
    deadline = time.monotonic() + 60
    while not _copy_open(process.pid, spool_dir) and time.monotonic() < deadline:
        time.sleep(0.05)  # until rllm holds its copy: it is inside the copying loop
    assert _copy_open(process.pid, spool_dir), "rllm never started copying stdin"
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 128 + signal.SIGTERM
    process.stdin.close()
    assert list(spool_dir.iterdir()) == [] and not (tmp_path / "out.jsonl").exists()


def test_stdin_copy_has_no_name_in_the_temp_folder(tmp_path: Path) -> None:
    """SIGKILL cannot be caught, so the copy of stdin must never have a name that could be left behind."""
    spool = tmp_path / "tmp"
    spool.mkdir()
    reader = subprocess.Popen(
        [sys.executable, "-m", "rllm.cli.main", "advantages", "-"],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        env={**os.environ, "TMPDIR": str(spool)},
    )
    assert reader.stdin is not None
    reader.stdin.write(b'{"group_id": 1, "reward": 1}\n')
    reader.stdin.flush()  # stdin stays open: the process is copying it
    deadline = time.monotonic() + 60
    while not _copy_open(reader.pid, spool) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _copy_open(reader.pid, spool), "the copy of stdin was never made"
    assert list(spool.iterdir()) == []
    reader.kill()
    reader.wait(timeout=30)
    assert list(spool.iterdir()) == []


def _copy_open(pid: int, folder: Path) -> bool:
    """Whether process ``pid`` holds a file of ``folder`` open (an unlinked one shows as '... (deleted)')."""
    links = []
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            links.append(os.readlink(fd))
        except OSError:
            continue
    return any(link.startswith(str(folder)) for link in links)


def test_output_onto_the_input_file_rewrites_it_in_place(source: Path) -> None:
    assert run(source, source) == 0
    assert source.read_text() == EXPECTED
    assert leftovers(source.parent) == []
