"""``rllm train``: config file, dot-list overrides, errors, episode logs and learning curves."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from extras import missing

from rllm.cli.main import main
from rllm.trainer.logging import METRICS_FILE, read_metrics


def _base(tmp_path: Path) -> list[str]:
    return [f"rllm.trainer.output_dir={tmp_path / 'run'}", "rllm.trainer.test_freq=0"]


def test_config_file_then_overrides_reach_the_trainer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "exp.yaml"
    config.write_text("rllm:\n  trainer:\n    total_batches: 5\n  algorithm:\n    adv_estimator: grpo\n")
    code = main(
        [
            "train",
            "--no-progress",
            str(config),
            *_base(tmp_path),
            "rllm.trainer.total_batches=3",
            "rllm.algorithm.adv_estimator=rloo",
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "[train step 3]" in out and "[train step 4]" not in out  # the override beat the file
    state = json.loads((tmp_path / "run" / "checkpoints" / "step_3" / "trainer.json").read_text())
    assert state["fingerprint"]["estimator"] == "rloo"
    records = read_metrics(tmp_path / "run" / METRICS_FILE)
    assert [r["step"] for r in records if r["kind"] == "train"] == [1, 2, 3]
    assert "val/digit_sum/pass@1" in records[0]  # validation before training


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("rllm.trainer.totl_batches=3", "Unknown config key 'rllm.trainer.totl_batches'.*Did you mean"),
        # Any installed backend plugin adds to the list: only embedded's presence is certain.
        ("rllm.backend=embeded", r"rllm.backend must be one of (.*, )?embedded(, .*)?; got 'embeded'. Did you mean"),
        ("rllm.algorithm.loss_fn=gspo", "loss_fn='gspo' is not supported by the embedded backend"),
        ("rllm.trainer.logger=[console,jsnl]", r"rllm.trainer.logger must be .*each one of .*Did you mean 'jsonl'\?"),
        ("rllm.embedded.tasks=[sudoku]", "rllm.embedded.tasks must be .*each one of digit_sum, digit_max, digit_chain"),
        ("rllm.data.train_batch_size=0", "rllm.data.train_batch_size must be an integer >= 1; got 0"),
    ],
)
def test_bad_settings_exit_2_naming_the_culprit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], override: str, message: str
) -> None:
    assert main(["train", *_base(tmp_path), "rllm.trainer.total_batches=1", override]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rllm train: error:")
    assert re.search(message, err), err


@pytest.mark.parametrize("loss", ["importance_sampling", "ppo", "cispo"])
def test_each_supported_loss_trains(tmp_path: Path, loss: str) -> None:
    assert (
        main(
            [
                "train",
                "--no-progress",
                *_base(tmp_path),
                "rllm.trainer.total_batches=3",
                "rllm.trainer.logger=[jsonl]",
                f"rllm.algorithm.loss_fn={loss}",
            ]
        )
        == 0
    )
    records = [r for r in read_metrics(tmp_path / "run" / METRICS_FILE) if r["kind"] == "train"]
    assert all(r["actor/grad_norm"] > 0 for r in records)
    if loss == "importance_sampling":
        assert all(r["actor/clip_fraction"] == 0 for r in records)


def test_episode_logs_are_whole_files_per_step(tmp_path: Path) -> None:
    log_dir = tmp_path / "episodes"
    assert (
        main(
            [
                "train",
                "--no-progress",
                *_base(tmp_path),
                "rllm.trainer.total_batches=2",
                "rllm.trainer.logger=[jsonl]",
                "rllm.episode_logging.log_episodes=true",
                f"rllm.episode_logging.episode_log_dir={log_dir}",
            ]
        )
        == 0
    )
    files = sorted(p.relative_to(log_dir).as_posix() for p in log_dir.rglob("*") if p.is_file())
    assert files == ["train/step_000001-000.jsonl", "train/step_000002-000.jsonl", "val/step_000000-000.jsonl"]
    episodes = [json.loads(line) for line in (log_dir / "train/step_000001-000.jsonl").read_text().splitlines()]
    assert len(episodes) == 20 * 8 and len({e["id"] for e in episodes}) == 160
    assert episodes[0]["termination_reason"] == "env_done" and episodes[0]["trajectories"][0]["name"] == "solver"


def test_plot_compares_several_runs(tmp_path: Path) -> None:
    runs = []
    for estimator in ("grpo", "rloo"):
        run_dir = tmp_path / estimator
        assert (
            main(
                [
                    "train",
                    "--no-progress",
                    f"rllm.trainer.output_dir={run_dir}",
                    "rllm.trainer.total_batches=2",
                    "rllm.trainer.logger=[jsonl]",
                    f"rllm.algorithm.adv_estimator={estimator}",
                ]
            )
            == 0
        )
        assert (run_dir / "learning_curve.png").stat().st_size > 0
        runs.append(str(run_dir))
    output = tmp_path / "compare.png"
    assert main(["train", "--plot", *runs, "--output", str(output)]) == 0
    assert output.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib_says_how_to_get_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert main(["train", "--plot", str(tmp_path), "--output", str(tmp_path / "x.png")]) == 2
    assert "pip install 'rllm[plot]'" in capsys.readouterr().err


@pytest.mark.skipif(bool(missing("torch", "transformers")), reason="not installed: pip install 'rllm[transformers]'")
def test_the_start_line_names_each_roles_loss_with_its_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    losses = ["rllm.algorithm.loss_fn=ppo", "rllm.algorithm.eps_clip=0.25", "+rllm.algorithm.loss_fn_map.b=reinforce"]
    short = ["rllm.trainer.total_batches=1", "rllm.trainer.val_before_train=false", "rllm.backend=transformers"]
    assert main(["train", "--no-progress", *_base(tmp_path), *short, *losses]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    # ppo's clip_ratio is rLLM's eps_clip; reinforce takes no options
    assert ", loss ppo (clip_ratio=0.25, " in first, first
    assert "; token-mean), role b: reinforce (token-mean), 1 steps" in first, first
