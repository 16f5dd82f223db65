"""The rllm command line, run in-process through its entry function."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rllm.cli.main import main


def rollouts(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines))
    return path


def test_advantages_on_bundled_sample(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["advantages"]) == 0
    out, err = capsys.readouterr()
    records = [json.loads(line) for line in out.splitlines()]
    assert len(records) == 20 and all("advantage" in r for r in records)
    assert "reward/solver/mean" in err and "advantage/verifier/std" in err


def rloo_on_file(tmp_path: Path, lines: list[str]) -> list[dict[str, object]]:
    """Run `rllm advantages -e rloo` from one file to another and read the result back."""
    out = tmp_path / "out.jsonl"
    assert main(["advantages", str(rollouts(tmp_path / "in.jsonl", lines)), "-o", str(out), "-e", "rloo"]) == 0
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_advantages_writes_file_with_estimator_and_keeps_fields(tmp_path: Path) -> None:
    records = rloo_on_file(
        tmp_path,
        [
            '{"task_id": "q:1", "reward": 3, "text": "a"}',
            '{"task_id": "q:2", "reward": 5}',
            '{"task_id": "q:1", "reward": 1, "text": "b"}',
        ],
    )
    # RLOO: group q:1 = [3, 1] -> +2, -2; q:2 is alone and keeps its reward 5.
    assert [r["advantage"] for r in records] == [2.0, 5.0, -2.0]
    assert records[0]["text"] == "a" and records[2]["text"] == "b"


def test_roles_group_separately(tmp_path: Path) -> None:
    records = rloo_on_file(
        tmp_path,
        [
            '{"group_id": "g", "role": "a", "reward": 1}',
            '{"group_id": "g", "role": "b", "reward": 4}',
            '{"group_id": "g", "role": "a", "reward": 3}',
        ],
    )
    # Role a = [1, 3] -> -2, +2; role b is alone and keeps its reward 4.
    assert [r["advantage"] for r in records] == [-2.0, 4.0, 2.0]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "line 2: not valid JSON"),
        ('{"reward": 1}', "line 2: no group label"),
        ('{"task_id": 1, "reward": "high"}', "line 2: 'reward' must be a number"),
        ("[1, 2]", "line 2: expected a JSON object"),
    ],
)
def test_malformed_line_is_named_and_nothing_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], line: str, message: str
) -> None:
    src = rollouts(tmp_path / "in.jsonl", ['{"task_id": 1, "reward": 1}', line])
    out = tmp_path / "out.jsonl"
    out.write_text("previous results\n")
    assert main(["advantages", str(src), "-o", str(out)]) == 2
    assert message in capsys.readouterr().err
    assert out.read_text() == "previous results\n"


def test_unknown_estimator_and_config_key_are_reported(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["advantages", "-e", "rlooo"]) == 2
    assert "Did you mean 'rloo'" in capsys.readouterr().err
    assert main(["advantages", "rllm.algorithm.epsilom=0.1"]) == 2
    assert "Did you mean 'rllm.algorithm.epsilon'" in capsys.readouterr().err


def test_plugins_json_lists_builtin(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plugins", "--json"]) == 0
    infos = {p["name"]: p for p in json.loads(capsys.readouterr().out)}
    builtin = infos["builtin"]
    assert builtin["status"] == "ok" and builtin["distribution"] == "rllm"
    assert {"grpo", "rloo", "reinforce", "reinforce_plus_plus_baseline"} <= set(builtin["estimators"])
    assert "rllm_register_estimators" in builtin["hooks"]
