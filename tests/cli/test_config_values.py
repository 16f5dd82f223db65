"""Every numeric, boolean and choice key of the schema refuses a wrong value before anything runs.

Table-driven from the schema in force (rllm's keys and the built-in plugin's ``rllm.embedded``
section, declared through the config hook): for each key, each wrong value gives exit
code 2, exactly one line on stderr naming the key, no traceback, and no file written.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rllm.cli.main import main
from rllm.config import ConfigKey, current_schema

KEYS = current_schema().keys


def _wrong_values(key: ConfigKey) -> list[str]:
    """Command-line values the key must refuse."""
    values: list[str] = []
    if key.type in ("int", "float"):
        values.append("abc")
        if key.minimum is not None:
            below = key.minimum if key.above else key.minimum - 1
            while below in key.special:
                below -= 1
            values.append(str(int(below)) if key.type == "int" else str(float(below)))
        if key.maximum is not None:
            values.append(str(key.maximum + 1))
        if key.type == "int":
            values.append("1.5")
    elif key.type == "bool":
        values += ["'false'", "maybe", "1"]
    elif key.allowed() is not None:
        values += ["[nonsuch]", "digit_chain"] if key.type == "list[str]" else ["nonsuch", "[a]"]
    return values


CASES = [
    pytest.param(key.path, value, id=f"{key.path}={value}")
    for key in KEYS
    if key.type != "mapping"
    for value in _wrong_values(key)
]


def test_the_table_covers_every_checked_key() -> None:
    covered = {case.values[0] for case in CASES}
    checked = {k.path for k in KEYS if k.type in ("int", "float", "bool") or k.allowed() is not None}
    assert covered == checked
    assert len(checked) >= 50 and "rllm.embedded.lr" in checked


@pytest.mark.parametrize(("path", "value"), CASES)
def test_wrong_value_is_one_line_naming_the_key_and_writes_nothing(
    path: str, value: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--no-progress", "rllm.trainer.total_batches=1", f"{path}={value}"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"rllm train: error: {path} must be "), err
    assert "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_preset_is_checked_before_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["train", "rllm.algorithm.estimator_options.preset=verll"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "rllm train: error: rllm.algorithm.estimator_options.preset must be one of openrlhf, rllm, skyrl, trl, "
        "verl; got 'verll'. Did you mean 'verl'?\n"
    )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["train", "advantages", "config"])
def test_real_process_exit_2_without_traceback(command: str, tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "rllm.cli.main", command, "rllm.algorithm.gamma=abc"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr == (
        f"rllm {command}: error: rllm.algorithm.gamma must be a number >= 0 and <= 1; got 'abc' (str).\n"
    )
    assert result.stdout == "" and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"rllm:\n  trainer: {total_epochs: 3\n", "is not valid YAML"),
        (b"rllm:\n  trainer:\n    experiment_name: caf\xe9\n", "is not UTF-8 text (invalid continuation byte at byte"),
        (b"- a\n- b\n", "holds a list; it must hold a mapping of keys."),
        (b"rllm:\n  trainer: 5\n", "rllm.trainer must be a mapping of keys; got 5."),
        (b"rllm:\n  rollout:\n    n: '8'\n", "rllm.rollout.n must be an integer >= 1; got '8' (str)."),
    ],
)
def test_bad_config_file_is_one_line(
    content: bytes, message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("bad.yaml").write_bytes(content)
    assert main(["train", "-c", "bad.yaml"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and message in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml"]


def _memory_cap() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))  # an unbounded expansion fails fast, not the machine


def test_an_interpolation_doubling_bomb_is_refused_naming_the_key(tmp_path: Path) -> None:
    """39 levels of ``s_k = ${.s_{k-1}}${.s_{k-1}}`` would resolve to 2**39 characters."""
    options = "\n".join(f"      s{k}: '${{.s{k - 1}}}${{.s{k - 1}}}'" for k in range(1, 40))
    config = tmp_path / "bomb.yaml"
    config.write_text(f"rllm:\n  algorithm:\n    estimator_options:\n      s0: x\n{options}\n")
    done = subprocess.run(
        [sys.executable, "-m", "rllm.cli.main", "config", "-c", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=_memory_cap,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "rllm.algorithm.estimator_options.s" in done.stderr and "would resolve to more than" in done.stderr
