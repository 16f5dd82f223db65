"""`rllm config` refuses, when loading, the estimator choices and values a run would refuse later."""

from __future__ import annotations

from pathlib import Path

import pytest

from rllm.cli.main import main


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("rllm.algorithm.estimator_map.solver=nosuch", "rllm.algorithm.estimator_map.solver must be one of"),
        ("rllm.algorithm.estimator_map.solver=[nosuch,ppo]", "got 'nosuch'"),
        ("rllm.algorithm.estimator_options.grpo.eps=abc", "Option 'eps' of estimator 'grpo'"),
        ("rllm.algorithm.estimator_options.rloo.bogus=1", "'bogus'"),
        ("rllm.trainer.total_epochs=" + "9" * 50, "rllm.trainer.total_epochs must be an integer"),
    ],
)
def test_bad_choice_is_refused(capsys: pytest.CaptureFixture[str], override: str, needle: str) -> None:
    assert main(["config", override]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and needle in err, err


def test_integer_role_key_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "roles.yaml"
    path.write_text("rllm:\n  algorithm:\n    estimator_map:\n      1: rloo\n")
    assert main(["config", "-c", str(path)]) == 2
    assert "the role 1 is not a string (int); roles are strings, so quote it ('1': ...)" in capsys.readouterr().err


def test_good_choices_are_kept(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["config", "rllm.algorithm.estimator_map.solver=rloo", "rllm.algorithm.estimator_options.grpo.eps=0.01"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "solver: rloo" in out and "eps: 0.01" in out
