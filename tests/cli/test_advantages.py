"""``rllm advantages``: estimator inputs from JSON Lines fields, JSON label types, input errors."""

from __future__ import annotations

import json
import math
import os
import pty
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import rllm
from rllm.cli.main import main


def write_lines(path: Path, records: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def advantages_of(tmp_path: Path, records: list[dict[str, object]], *args: str) -> list[object]:
    source = write_lines(tmp_path / "in.jsonl", records)
    out = tmp_path / "out.jsonl"
    assert main(["advantages", str(source), "-o", str(out), *args]) == 0
    return [json.loads(line)["advantage"] for line in out.read_text().splitlines()]


OPO_LINES = [
    {"group_id": "g1", "reward": 1, "response_length": 2},
    {"group_id": "g1", "reward": 0, "response_length": 6},
    {"group_id": "g1", "reward": 0, "response_length": 2},
    {"group_id": "g2", "reward": 1, "response_length": 1},
    {"group_id": "g2", "reward": 1, "response_length": 1},
    {"group_id": "g2", "reward": 0, "response_length": 8},
]


def test_opo_uses_per_line_response_lengths(tmp_path: Path) -> None:
    got = advantages_of(tmp_path, OPO_LINES, "-e", "opo")
    # Length-weighted baselines: g1 (2*1)/10 = 0.2, g2 (1+1)/10 = 0.2 (plain means would be 1/3 and 2/3).
    assert got == pytest.approx([0.8, -0.2, -0.2, 0.8, 0.8, -0.2])
    expected = rllm.compute_advantages(
        "opo",
        [r["reward"] for r in OPO_LINES],
        [r["group_id"] for r in OPO_LINES],
        response_lengths=[r["response_length"] for r in OPO_LINES],
    )
    assert got == expected.tolist()


def test_remax_uses_the_baseline_field(tmp_path: Path) -> None:
    lines = [
        {"task_id": "q", "reward": 1.0, "baseline_reward": 0.25},
        {"task_id": "q", "reward": 0.5, "baseline_reward": 0.75},
    ]
    assert advantages_of(tmp_path, lines, "-e", "remax") == [0.75, -0.25]


def test_gdpo_reads_components_as_lists_or_objects(tmp_path: Path) -> None:
    as_lists = [{"group_id": 0, "reward": 0, "reward_components": c} for c in ([1, 0], [0, 1], [1, 1], [0, 0])]
    as_objects = [
        {"group_id": 0, "reward": 0, "reward_components": {"b": c[1], "a": c[0]}}
        for c in ([1, 0], [0, 1], [1, 1], [0, 0])
    ]
    expected = rllm.compute_advantages("gdpo", [0] * 4, [0] * 4, reward_components=[[1, 0], [0, 1], [1, 1], [0, 0]])
    assert advantages_of(tmp_path, as_lists, "-e", "gdpo") == pytest.approx(expected.tolist())
    assert advantages_of(tmp_path, as_objects, "-e", "gdpo") == pytest.approx(expected.tolist())


def test_per_step_estimators_write_a_list_per_line(tmp_path: Path) -> None:
    lines = [
        {"group_id": "a", "reward": 1, "step_rewards": [0, 1], "step_values": [0.5, 0.5]},
        {"group_id": "a", "reward": 0, "step_rewards": [0, 0, 0], "step_values": [0.2, 0.1, 0.0]},
    ]
    got = advantages_of(tmp_path, lines, "-e", "gae")
    expected = rllm.compute_advantages(
        "gae",
        [1, 0],
        ["a", "a"],
        step_rewards=[[0, 1], [0, 0, 0]],
        step_values=[[0.5, 0.5], [0.2, 0.1, 0.0]],
    )
    assert [len(row) for row in got] == [2, 3]  # type: ignore[arg-type]
    assert np.concatenate(got).tolist() == pytest.approx(expected.values.tolist())  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("estimator", "record", "message"),
    [
        ("opo", {"group_id": 1, "reward": 1}, "no 'response_length' field, which estimator 'opo' needs."),
        ("remax", {"group_id": 1, "reward": 1}, "no 'baseline_reward' field, which estimator 'remax' needs."),
        ("gae", {"group_id": 1, "reward": 1, "step_rewards": [1]}, "no 'step_values' field, which estimator 'gae'"),
        ("opo", {"group_id": 1, "reward": 1, "response_length": -3}, "'response_length' must be integer >= 0, got -3."),
    ],
)
def test_missing_or_bad_field_names_the_field_and_the_estimator(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], estimator: str, record: dict[str, object], message: str
) -> None:
    source = write_lines(tmp_path / "in.jsonl", [record])
    assert main(["advantages", str(source), "-e", estimator, "-o", str(tmp_path / "out.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"rllm advantages: error: {source}, line 1: ") and message in err
    assert len(err.splitlines()) == 1, err
    assert not (tmp_path / "out.jsonl").exists()


def test_json_types_of_group_labels_stay_distinct(tmp_path: Path) -> None:
    labels = [1, "1", 1.0, None, True, "None"]
    lines = [{"group_id": label, "reward": reward} for i, label in enumerate(labels) for reward in (i, 10)]
    got = advantages_of(tmp_path, lines, "-e", "rloo")
    # RLOO on a pair [a, b] is [a - b, b - a]; merged groups would mix the pairs.
    expected = [v for i in range(len(labels)) for v in (i - 10, 10 - i)]
    assert got == expected


def test_help_lists_the_fields_and_who_needs_them(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["advantages", "--help"])
    out = capsys.readouterr().out
    for name in ("response_length", "baseline_reward", "reward_components", "step_rewards", "step_values"):
        assert f"  {name}" in out
    assert "opo (response_length)" in out and "gae (step_rewards, step_values)" in out


def test_stdin_input_and_other_fields_kept(tmp_path: Path) -> None:
    text = '{"task_id": "q", "reward": 3, "text": "a \\u00e9"}\n\n{"task_id": "q", "reward": 1}\n'
    result = subprocess.run(
        [sys.executable, "-m", "rllm.cli.main", "advantages", "-", "-e", "rloo"],
        input=text.encode(),
        capture_output=True,
        check=False,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in result.stdout.decode().splitlines()]
    assert records == [
        {"task_id": "q", "reward": 3, "text": "a é", "advantage": 2.0},
        {"task_id": "q", "reward": 1, "advantage": -2.0},
    ]
    assert b"2 rollouts in 1 group, estimator rloo" in result.stderr
    assert list(tmp_path.iterdir()) == []  # the copy of stdin is gone


def test_existing_advantage_field_is_replaced(tmp_path: Path) -> None:
    lines = [{"task_id": "q", "reward": 3, "advantage": "old"}, {"task_id": "q", "reward": 1}]
    assert advantages_of(tmp_path, lines, "-e", "rloo") == [2.0, -2.0]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'{"task_id": 1, "reward": 1}\n{"task_id": "caf\xe9", "reward": 1}\n', "line 2: not UTF-8 text"),
        (b'{"task_id": [1], "reward": 1}\n', "line 1: the group label must be a string, number, boolean or null"),
        (b'{"task_id": 1, "reward": 1, "role": 3}\n', "line 1: 'role' must be a string, got 3."),
        (b'{"task_id": 1, "reward": NaN}\n', "the first is line 1 of"),
    ],
)
def test_bad_input_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, message: str
) -> None:
    source = tmp_path / "in.jsonl"
    source.write_bytes(content)
    assert main(["advantages", str(source)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and message in err, err


def test_input_that_is_a_folder_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["advantages", str(tmp_path)]) == 2
    assert (
        capsys.readouterr().err
        == f"rllm advantages: error: Rollout file {str(tmp_path)!r} is a folder; give a .jsonl file.\n"
    )


def _run_with_stderr(tmp_path: Path, stderr: int) -> None:
    source = write_lines(tmp_path / "big.jsonl", [{"task_id": i // 4, "reward": i % 3} for i in range(20_000)])
    with (tmp_path / "out.jsonl").open("wb") as out:
        code = subprocess.run(
            [sys.executable, "-m", "rllm.cli.main", "advantages", str(source)], stdout=out, stderr=stderr, check=False
        ).returncode
    assert code == 0
    assert len((tmp_path / "out.jsonl").read_text().splitlines()) == 20_000


def test_progress_is_shown_on_a_terminal_only(tmp_path: Path) -> None:
    leader, follower = pty.openpty()
    try:
        _run_with_stderr(tmp_path, follower)
        os.close(follower)
        shown = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the terminal is closed once everything is read
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(leader)
    assert b"\rrllm advantages: reading" in shown and b"\rrllm advantages: writing" in shown
    assert b"20000 rollouts in 5000 groups" in shown

    log = tmp_path / "stderr.txt"
    with log.open("wb") as handle:
        _run_with_stderr(tmp_path, handle.fileno())
    assert b"\r" not in log.read_bytes() and log.read_bytes().startswith(b"20000 rollouts in 5000 groups")


def test_nonfinite_policy_zero_gives_those_groups_zero(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text(
        '{"task_id": 1, "reward": NaN}\n{"task_id": 1, "reward": 1}\n{"task_id": 2, "reward": 1}\n'
        '{"task_id": 2, "reward": 3}\n'
    )
    out = tmp_path / "out.jsonl"
    assert main(["advantages", str(source), "-e", "rloo", "-o", str(out), "rllm.algorithm.nonfinite_rewards=zero"]) == 0
    assert "rllm: warning: 1 group(s) have NaN or infinite rewards" in capsys.readouterr().err
    assert [json.loads(line)["advantage"] for line in out.read_text().splitlines()] == [0.0, 0.0, -2.0, 2.0]


def test_normalize_by_steps_is_applied_or_refused_never_ignored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "steps.jsonl"
    lines = [
        {"task_id": 0, "reward": 1.0, "step_rewards": [0, 1]},
        {"task_id": 0, "reward": 0.0, "step_rewards": [0, 0, 0]},
    ]
    source.write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = tmp_path / "out.jsonl"
    on = "rllm.stepwise_advantage.normalize_by_steps=true"
    assert main(["advantages", str(source), "-e", "reinforce_plus_plus", "-o", str(out), on]) == 0
    # Returns [1, 1] and [0, 0, 0], whitened (mean 0.4, population std sqrt(0.24)), then divided by 2 and 3 steps.
    std = math.sqrt(0.24) + 1e-6
    rows = [json.loads(line)["advantage"] for line in out.read_text().splitlines()]
    assert rows[0] == pytest.approx([0.6 / std / 2] * 2) and rows[1] == pytest.approx([-0.4 / std / 3] * 3)
    assert main(["advantages", str(source), "-e", "grpo", on]) == 2
    assert "'grpo' gives one advantage per line" in capsys.readouterr().err


def test_an_estimators_print_goes_to_stderr_not_into_the_json_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], plugin_manager: object
) -> None:
    def chatty(rewards: list[float]) -> list[float]:
        print("debug: scoring a group")
        return [r - 1.0 for r in rewards]

    rllm.register_rllm_adv_estimator("chatty_printer")(chatty)
    source = write_lines(tmp_path / "in.jsonl", [{"group_id": "g", "reward": 3}, {"group_id": "g", "reward": 5}])
    assert main(["advantages", str(source), "-e", "chatty_printer"]) == 0
    captured = capsys.readouterr()
    assert [json.loads(line)["advantage"] for line in captured.out.splitlines()] == [2.0, 4.0]
    assert "debug: scoring a group" in captured.err
