"""User mistakes at the command line: one line on stderr naming the file, line or key; no traceback."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from rllm.cli.main import main


def one_error(capsys: pytest.CaptureFixture[str], argv: list[str], *needles: str) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("rllm ")]
    assert "Traceback" not in err and len(lines) == 1, err
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


COMMAND = [sys.executable, "-c", "import sys; from rllm.cli.main import main; sys.exit(main())"]
"""``rllm`` in a child process: what a shell runs, with its own stdout."""

DIGITS = sys.get_int_max_str_digits()
"""Python reads integers of at most this many digits from text (4,300 unless the user changed it)."""


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        ('{"group_id": 1, "reward": 1' + "0" * 400 + "}", "'reward' is too large for a float (401 digits)"),
        ('{"group_id": 1, "reward": 1, "response_length": NaN}', "'response_length' must be integer >= 0"),
        ('{"group_id": 1, "reward": 1, "response_length": Infinity}', "'response_length' must be integer >= 0"),
        ('{"group_id": 1, "reward": 1, "response_length": 1' + "0" * 400 + "}", "an integer of 401 digits"),
        ('{"group_id": 1, "reward": 1' + "0" * 5000 + "}", f"an integer of more than {DIGITS:,} digits"),
        ('{"group_id": 1' + "0" * 5000 + ', "reward": 1}', f"an integer of more than {DIGITS:,} digits"),
        ('{"group_id": 1, "reward": 1, "x": ' + "[" * 200_000 + "]" * 200_000 + "}", "nested too deeply"),
        ('{"group_id": 1, "rewrd": 1}', "no 'reward' field (the line has the keys 'group_id', 'rewrd')"),
    ],
)
def test_bad_lines_are_named(tmp_path: Path, capsys: pytest.CaptureFixture[str], line: str, needle: str) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text('{"group_id": 1, "reward": 0, "response_length": 3}\n' + line + "\n")
    out = tmp_path / "out.jsonl"
    one_error(capsys, ["advantages", str(source), "-e", "opo", "-o", str(out)], "in.jsonl, line 2:", needle)
    assert not out.exists()


def test_null_reward_follows_the_policy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text('{"group_id": 1, "reward": 1}\n{"group_id": 1, "reward": null}\n{"group_id": 1, "reward": 0}\n')
    one_error(capsys, ["advantages", str(source)], "line 2 of", "missing, NaN or infinite")
    out = tmp_path / "out.jsonl"
    argv = ["advantages", str(source), "-o", str(out), "rllm.algorithm.nonfinite_rewards=exclude"]
    assert main(argv) == 0
    got = [json.loads(line)["advantage"] for line in out.read_text().splitlines()]
    # grpo over the two scorable rewards {1, 0}: mean 0.5, population std 0.5 (+1e-6) -> +-0.5/0.500001.
    assert got == pytest.approx([0.5 / 0.500001, 0.0, -0.5 / 0.500001])


def test_empty_estimator_name_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    one_error(capsys, ["advantages", "-e", ""], "-e/--estimator needs a name")


def test_field_over_an_input_field_warns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["advantages", "--field", "group_id", "-o", str(tmp_path / "o.jsonl")]) == 0
    assert "--field group_id overwrites the input field 'group_id'" in capsys.readouterr().err


def test_file_named_like_an_override_is_the_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "data=v1.jsonl"
    source.write_text('{"group_id": 1, "reward": 1}\n{"group_id": 1, "reward": 0}\n')
    out = tmp_path / "out.jsonl"
    assert main(["advantages", str(source), "-o", str(out)]) == 0
    assert len(out.read_text().splitlines()) == 2


def test_summary_is_capped_for_many_roles(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps({"group_id": 1, "role": f"r{i}", "reward": i % 2}) + "\n" for i in range(200)))
    assert main(["advantages", str(source), "-o", str(tmp_path / "o.jsonl")]) == 0
    report = capsys.readouterr().out.splitlines()
    assert len(report) < 150, len(report)  # 9 lines per role would be 1,801
    assert report[-1].strip() == "... and 190 more roles (the summary shows the first 10)"


def test_huge_rewards_summarise_without_overflow(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text('{"group_id": 1, "reward": 1e308}\n{"group_id": 1, "reward": -1e308}\n')
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # numpy's overflow warnings
        assert main(["advantages", str(source), "-o", str(tmp_path / "o.jsonl")]) == 0
    report = capsys.readouterr().out
    assert "reward/all_groups/std = 1e+308" in report and "inf" not in report


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("3\n", "holds a single value, not a mapping of keys"),
        ("rllm: [1, 2]\n", "rllm must be a mapping of keys; got [1, 2]"),
    ],
)
def test_config_file_shapes(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, needle: str) -> None:
    path = tmp_path / "f.yaml"
    path.write_text(text)
    for command in ("config", "train"):
        one_error(capsys, [command, "-c", str(path)], needle)


def test_config_folder_is_named_a_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    one_error(capsys, ["config", "-c", str(tmp_path)], "is a folder; give a YAML file")


def test_large_plain_yaml_is_read_and_alias_bombs_are_not(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    big = tmp_path / "big.yaml"
    values = ", ".join(["1"] * 12_000)  # 12,000 nodes and no alias
    big.write_text(f"rllm:\n  algorithm:\n    estimator_options:\n      not_installed:\n        big_list: [{values}]\n")
    assert main(["config", "-c", str(big)]) == 0
    capsys.readouterr()
    bomb = tmp_path / "bomb.yaml"
    lines = ["a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 6)]
    bomb.write_text("\n".join(lines) + "\n")  # 10**6 nodes once expanded, from a few hundred bytes
    one_error(capsys, ["config", "-c", str(bomb)], "uses YAML aliases that expand to more than 10,000 nodes")


@pytest.mark.parametrize(
    ("argv", "prefix"),
    [
        (["estimators"], "rllm estimators"),
        (["advantages", "IN"], "rllm advantages"),
        (["--version"], "rllm"),
        (["--help"], "rllm"),
        (["estimators", "--help"], "rllm"),
    ],
)
def test_full_device_is_one_error_line(tmp_path: Path, argv: list[str], prefix: str) -> None:
    """Every write to standard output is checked, argparse's --help and --version too (it drops their errors)."""
    source = tmp_path / "in.jsonl"
    source.write_text('{"group_id": 1, "reward": 1}\n{"group_id": 1, "reward": 0}\n')
    argv = [str(source) if word == "IN" else word for word in argv]
    with open("/dev/full", "wb") as full:
        done = subprocess.run([*COMMAND, *argv], stdout=full, stderr=subprocess.PIPE, timeout=120)
    err = done.stderr.decode()
    assert done.returncode != 0 and "Exception ignored" not in err, err
    assert err.strip() == f"{prefix}: error: Could not write standard output: No space left on device."


def test_a_training_run_on_a_full_device_is_one_error_line(tmp_path: Path) -> None:
    with open("/dev/full", "wb") as full:
        done = subprocess.run(
            [*COMMAND, "train", "rllm.trainer.total_batches=2"],
            stdout=full,
            stderr=subprocess.PIPE,
            cwd=tmp_path,
            timeout=300,
        )
    err = done.stderr.decode()
    assert done.returncode == 1 and "Exception ignored" not in err, err
    assert err.strip() == "rllm train: error: Could not write standard output: No space left on device."


def test_broken_pipe_exits_quietly(tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps({"group_id": i // 4, "reward": i % 3}) + "\n" for i in range(100_000)))
    producer = subprocess.Popen([*COMMAND, "advantages", str(source)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert producer.stdout is not None and producer.stderr is not None
    producer.stdout.readline()
    producer.stdout.close()  # what `| head -1` does
    err = producer.stderr.read().decode()
    assert producer.wait(timeout=120) == 0 and err == "", err


def test_nan_reward_component_is_located_by_line_and_label(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text(
        '{"group_id": "a", "reward": 1, "reward_components": [1, 0]}\n'
        '{"group_id": "a", "reward": 0, "reward_components": [NaN, 1]}\n'
    )
    one_error(capsys, ["advantages", str(source), "-e", "gdpo"], "component 0 is NaN or infinite at line 2 of", "'a'")
