"""``rllm config``, ``rllm --version``, the shared grammar, and the config a run records."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rllm.cli.main import main
from rllm.trainer.logging import METRICS_FILE, read_metrics
from rllm.version import __version__


def rllm(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rllm.cli.main", *args], cwd=cwd, capture_output=True, text=True, check=False
    )


def test_version_and_help_in_a_real_process(tmp_path: Path) -> None:
    version = rllm("--version", cwd=tmp_path)
    assert (version.returncode, version.stdout) == (0, f"rllm {__version__}\n")
    helped = rllm("--help", cwd=tmp_path)
    assert helped.returncode == 0 and "Examples:\n  rllm train" in helped.stdout
    assert "``" not in helped.stdout and ":class:" not in helped.stdout  # plain text, no reST


@pytest.mark.parametrize("command", ["train", "advantages", "config"])
def test_every_command_has_plain_help_with_an_example(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert f"Examples:\n  rllm {command}" in out and "-c FILE, --config FILE" in out
    assert "``" not in out and ":class:" not in out


def test_config_prints_file_then_overrides_merged(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first = tmp_path / "base.yaml"
    first.write_text("rllm:\n  trainer:\n    total_epochs: 3\n    experiment_name: base\n")
    second = tmp_path / "more.yaml"
    second.write_text("rllm:\n  trainer:\n    experiment_name: more\n")
    code = main(["config", "-c", str(first), str(second), "rllm.rollout.n=4", "--resolve"])
    assert code == 0
    config = yaml.safe_load(capsys.readouterr().out)
    trainer = config["rllm"]["trainer"]
    assert (trainer["total_epochs"], trainer["experiment_name"], config["rllm"]["rollout"]["n"]) == (3, "more", 4)
    assert trainer["output_dir"] == "runs/rllm/more"  # --resolve: interpolation replaced
    assert config["rllm"]["trainer"]["save_freq"] == 20  # defaults are all there


def test_config_keys_lists_type_default_and_doc(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "--keys"]) == 0
    out = capsys.readouterr().out
    assert (
        "rllm.trainer.total_batches\n    an integer >= 1 (or -1); default: -1\n"
        "    Stop after this many steps; -1: no limit.\n" in out
    )
    assert "rllm.algorithm.lr_schedule\n    one of linear, cosine, constant; default: constant\n" in out


@pytest.mark.parametrize(
    ("words", "message"),
    [
        (["foo"], "'foo' is neither a config file (.yaml) nor key=value"),
        (["rllm.trainer.total_epochs"], "'rllm.trainer.total_epochs' is a config key without a value"),
        (["missing.yaml"], "config file 'missing.yaml' does not exist"),
        (["notes.txt"], "'notes.txt' is not a config file (they end in .yaml or .yml) nor key=value"),
    ],
)
def test_bare_words_are_usage_errors_saying_what_they_look_like(
    words: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["config", *words]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: rllm config ")
    assert f"rllm config: error: {message}" in err


def test_warnings_are_one_line_with_the_rllm_prefix(tmp_path: Path) -> None:
    result = rllm("advantages", "rllm.stepwise_advantage.mode=per_step", cwd=tmp_path)
    assert result.returncode == 0
    warning_lines = [line for line in result.stderr.splitlines() if "per_step" in line]
    assert len(warning_lines) == 1 and warning_lines[0].startswith("rllm: warning: stepwise_advantage_mode='per_step'")
    source = tmp_path / "in.jsonl"
    source.write_text('{"task_id": 1, "reward": NaN}\n{"task_id": 1, "reward": 1}\n{"task_id": 2, "reward": 1}\n')
    result = rllm("advantages", str(source), "rllm.algorithm.nonfinite_rewards=zero", cwd=tmp_path)
    assert result.returncode == 0
    assert "rllm: warning: 1 group(s) have NaN or infinite rewards and get zero advantage" in result.stderr
    assert ".py:" not in result.stderr and "warnings.warn" not in result.stderr  # no source location or line


def _train_records(run_dir: Path) -> list[dict[str, object]]:
    """Metrics without wall-clock fields, which differ between two identical runs."""
    records = read_metrics(run_dir / METRICS_FILE)
    return [{k: v for k, v in r.items() if not k.startswith("time/") and k != "wall_time"} for r in records]


def test_a_run_records_its_config_and_reloading_it_reproduces_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = tmp_path / "exp.yaml"
    settings.write_text("rllm:\n  trainer:\n    total_batches: 3\n    test_freq: 2\n  rollout:\n    n: 4\n")
    first = tmp_path / "first"
    assert (
        main(
            [
                "train",
                "--no-progress",
                str(settings),
                f"rllm.trainer.output_dir={first}",
                "rllm.algorithm.adv_estimator=rloo",
                "rllm.embedded.seed=7",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    loss = "loss ppo (clip_ratio_low=0.2, clip_ratio_high=0.2; token-sum)"  # the embedded backend's defaults
    assert (
        out.splitlines()[0] == f"rllm train: backend embedded, estimator rloo, {loss}, 3 steps, run directory {first}"
    )
    recorded = first / "config.yaml"
    assert yaml.safe_load(recorded.read_text())["rllm"]["embedded"]["seed"] == 7

    second = tmp_path / "second"
    assert main(["train", "--no-progress", "-c", str(recorded), f"rllm.trainer.output_dir={second}"]) == 0
    capsys.readouterr()
    assert json.dumps(_train_records(second)) == json.dumps(_train_records(first))
    assert len([r for r in _train_records(first) if r["kind"] == "train"]) == 3


def test_words_may_follow_options(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "rllm.rollout.n=3", "--resolve", "rllm.rollout.n_val=2"]) == 0
    rollout = yaml.safe_load(capsys.readouterr().out)["rllm"]["rollout"]
    assert (rollout["n"], rollout["n_val"]) == (3, 2)
    with pytest.raises(SystemExit) as exit_info:  # argparse's own usage errors exit with 2
        main(["config", "rllm.rollout.n=3", "--resolve", "--bogus"])
    assert exit_info.value.code == 2
    assert "rllm config: error: unrecognized arguments: --bogus" in capsys.readouterr().err
