"""``rllm estimators``: every built-in estimator with its provider, inputs and declared options."""

from __future__ import annotations

import json

import pytest

from rllm.cli.main import main


def test_json_lists_every_builtin_with_options_and_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["estimators", "--json"]) == 0
    listed = {item["name"]: item for item in json.loads(capsys.readouterr().out)}
    assert {"grpo", "rloo", "gae", "mix", "pkpo", "group_norm", "rloo_vectorized"} <= set(listed)
    for name, item in listed.items():
        if item["provided_by"].startswith("built-in plugin"):
            assert item["options_declared"], f"{name} does not declare its options"
    grpo = {option["name"]: option for option in listed["grpo"]["options"]}
    assert grpo["norm_adv_by_std_in_grpo"]["default"] is True
    assert grpo["single"]["type"] == "one of 'raw', 'zero', 'error'"
    gae = {option["name"]: option["default"] for option in listed["gae"]["options"]}
    assert (gae["gamma"], gae["lam"], gae["normalize"]) == (1.0, 0.95, True)
    assert listed["gae"]["requires"] == ["step_rewards", "step_values"]
    assert listed["opo"]["requires"] == ["response_lengths"]
    assert listed["pkpo"]["options"][0] == {
        "name": "pass_at_k",
        "type": "an integer",
        "default": 1,
        "doc": "the k of pass@k to optimise (every group needs k rollouts)",
    }


def test_one_estimator_in_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["estimators", "gpg"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("gpg  (built-in plugin 'builtin'")
    assert "f_norm = 1.0" in out and "numerics options: preset" in out


def test_unknown_name_is_one_line_with_a_suggestion(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["estimators", "grpoo"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Did you mean 'grpo'" in err
