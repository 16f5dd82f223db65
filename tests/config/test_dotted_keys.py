"""A dotted key (``rllm.algorithm.adv_estimator: rloo``) means the nested keys at every door, and is checked there.

Without this, YAML keeps ``a.b`` as one key no reader looks up: the run used grpo, and
``rllm.trainer.total_epochs: 0`` written dotted escaped the range check.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from rllm import ConfigError, load_config
from rllm.cli.main import main
from rllm.trainer import AgentTrainer, UnifiedTrainer

TOP = "rllm.algorithm.adv_estimator: rloo\n"
NESTED = "rllm:\n  algorithm.adv_estimator: rloo\n"
ZERO_EPOCHS = "rllm:\n  trainer.total_epochs: 0\n"
RANGE = "rllm.trainer.total_epochs must be an integer >= 1; got 0"


def _file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "exp.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("text", [TOP, NESTED], ids=["top-level", "nested"])
def test_rllm_config_applies_a_dotted_key_of_a_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str
) -> None:
    assert main(["config", str(_file(tmp_path, text))]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["rllm"]["algorithm"]["adv_estimator"] == "rloo"
    assert not [key for key in printed["rllm"] if "." in key] and not [key for key in printed if "." in key]


def test_rllm_config_checks_a_dotted_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", str(_file(tmp_path, ZERO_EPOCHS))]) == 2
    assert RANGE in capsys.readouterr().err


def test_a_mapping_override_nests_and_checks_its_keys(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "rllm={algorithm.adv_estimator: rloo}"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["rllm"]["algorithm"]["adv_estimator"] == "rloo"
    assert main(["config", "rllm.trainer={total_epochs: 0}"]) == 2
    assert RANGE in capsys.readouterr().err
    assert main(["config", "rllm.trainer={total_epochs: 1, totl_batches: 2}"]) == 2  # was merged unchecked
    assert "Unknown config key 'rllm.trainer.totl_batches'" in capsys.readouterr().err


def test_names_in_open_mappings_keep_their_dots() -> None:
    """``verl.grpo`` is an estimator's name, not a section: written nested below an open mapping it stays whole."""
    config = load_config(
        {"rllm.algorithm.estimator_map.solver": "rloo", "rllm": {"algorithm": {"loss_options": {"a.b": {"c.d": 1}}}}}
    )
    assert config.rllm.algorithm.estimator_map == {"solver": "rloo"}
    assert dict(config.rllm.algorithm.loss_options) == {"a.b": {"c.d": 1}}


def test_one_key_set_dotted_and_nested_is_refused_naming_both() -> None:
    with pytest.raises(ConfigError, match=r"as 'rllm.trainer.total_epochs' and as 'rllm: trainer: total_epochs'"):
        load_config({"rllm.trainer.total_epochs": 2, "rllm": {"trainer": {"total_epochs": 3}}})
    with pytest.raises(ConfigError, match=r"as 'rllm.trainer' and as 'rllm: trainer.total_epochs'"):
        load_config({"rllm.trainer": 5, "rllm": {"trainer.total_epochs": 3}})


def test_rllm_train_applies_and_checks_dotted_keys(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    base = [f"rllm.trainer.output_dir={run}", "rllm.trainer.test_freq=0", "rllm.trainer.val_before_train=false"]
    assert main(["train", "--no-progress", str(_file(tmp_path, ZERO_EPOCHS)), *base]) == 2
    assert RANGE in capsys.readouterr().err and not run.exists()
    assert main(["train", "--no-progress", str(_file(tmp_path, NESTED)), *base, "rllm.trainer.total_batches=1"]) == 0
    state = json.loads((run / "checkpoints" / "step_1" / "trainer.json").read_text())
    assert state["fingerprint"]["estimator"] == "rloo"


def test_rllm_advantages_config_file_applies_a_dotted_key(tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps({"group_id": "g", "reward": r}) + "\n" for r in (1, 3, 5)))
    out = tmp_path / "out.jsonl"
    assert main(["advantages", str(source), "-c", str(_file(tmp_path, TOP)), "-o", str(out)]) == 0
    # rloo: each reward minus the mean of the others, 1-4, 3-3, 5-2 (grpo would give -1, 0, 1 scaled by 1/2)
    assert [json.loads(line)["advantage"] for line in out.read_text().splitlines()] == [-3.0, 0.0, 3.0]


def test_agent_trainer_config_applies_and_checks_dotted_keys() -> None:
    trainer = AgentTrainer(config={"rllm": {"algorithm.adv_estimator": "rloo"}}, backend="embedded")
    assert trainer.config.rllm.algorithm.adv_estimator == "rloo"
    with pytest.raises(ConfigError, match=RANGE):
        AgentTrainer(config={"rllm": {"trainer.total_epochs": 0}}, backend="embedded")


def test_unified_trainer_config_applies_and_checks_dotted_keys(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=RANGE):
        UnifiedTrainer("embedded", {"rllm": {"trainer.total_epochs": 0}})
    trainer = UnifiedTrainer(
        "embedded", {"rllm.trainer.output_dir": str(tmp_path / "run"), "rllm": {"algorithm.adv_estimator": "rloo"}}
    )
    try:
        assert trainer.algorithm_config.estimator == "rloo"
    finally:
        trainer.shutdown()


def test_verl_bridge_reads_rllm_options_written_dotted() -> None:
    inside_verl = pytest.importorskip("rllm_verl.inside_verl", reason="needs the rllm-verl plugin")
    options, _ = inside_verl.settings({"rllm_options.preset": "verl", "rllm_options": {"clip": 1.5}})
    assert options == {"preset": "verl", "clip": 1.5}
    with pytest.raises(ConfigError, match=r"as 'rllm_options\.preset' and as 'rllm_options: preset'"):
        inside_verl.settings({"rllm_options.preset": "verl", "rllm_options": {"preset": "trl"}})


def test_nest_dotted_leaves_a_mapping_without_dotted_keys_alone() -> None:
    from rllm.config import nest_dotted

    assert nest_dotted({"rllm": {"trainer": {"total_epochs": 2}}}) is None
