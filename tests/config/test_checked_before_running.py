"""What a run refuses is refused when the config is loaded: by ``rllm config`` as by ``rllm train``, nothing written.

A misspelt shared estimator option and ``loss_fn=dro`` without ``dro_beta`` used to fail only
after validation step 0 had run and ``config.yaml`` and ``metrics.jsonl`` were written;
``rllm config rllm.algorithm.loss_fn=gspoo`` printed a config ``rllm train`` refuses.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from extras import missing

from rllm import ConfigError, hookimpl, load_config
from rllm.cli.main import main
from rllm.contract.keys import Option
from rllm.errors import EstimatorOptionError, LossOptionError
from rllm.plugins import PluginManager
from rllm.plugins.registry import Source

PREST = "Estimator 'grpo' (built-in plugin 'builtin', distribution rllm"
MISSPELT = ("rllm.algorithm.estimator_options.prest=verl", r"has no option 'prest'\. Did you mean 'preset'\?")
NO_BETA = (
    "rllm.algorithm.loss_fn=dro",
    r"Loss 'dro' .* needs option 'dro_beta', a number above 0.0; it has no default",
)
UNKNOWN_LOSS = ("rllm.algorithm.loss_fn=gspoo", r"Unknown loss 'gspoo'\. Did you mean 'gspo'")


@pytest.mark.parametrize(("override", "message"), [MISSPELT, NO_BETA, UNKNOWN_LOSS], ids=["option", "dro", "loss"])
def test_rllm_config_refuses_what_a_run_refuses(
    override: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["config", override]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rllm config: error:") and err.count("\n") == 1
    assert re.search(message, err)


def test_the_checks_follow_the_estimators_in_use() -> None:
    """A shared option is checked against every estimator a role uses; one under an unused name only if known."""
    with pytest.raises(EstimatorOptionError, match=r"Estimator 'ema_baseline'.*has no option 'whiten_eps'"):
        load_config(
            overrides=[
                "rllm.algorithm.estimator_options.whiten_eps=0.1",
                "+rllm.algorithm.estimator_map.a=ema_baseline",
            ]
        )
    config = load_config(overrides=["rllm.algorithm.estimator_options.whiten_eps=0.1"])  # grpo takes it
    assert config.rllm.algorithm.estimator_options.whiten_eps == 0.1
    with pytest.raises(LossOptionError, match="needs option 'dro_beta'"):
        load_config(overrides=["+rllm.algorithm.loss_fn_map.critic=dro"])
    load_config(overrides=["rllm.algorithm.loss_fn=dro", "rllm.algorithm.loss_options.dro_beta=0.1"])


def test_rllm_train_refuses_a_misspelt_option_before_writing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    assert main(["train", "--no-progress", f"rllm.trainer.output_dir={run}", MISSPELT[0]]) == 2
    captured = capsys.readouterr()
    assert "has no option 'prest'" in captured.err and "[val step 0]" not in captured.out
    assert not run.exists()


@pytest.mark.skipif(bool(missing("torch")), reason="torch is not installed (pip install torch==2.13.0+cpu)")
def test_rllm_train_refuses_dro_without_beta_before_writing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    assert (
        main(["train", "--no-progress", f"rllm.trainer.output_dir={run}", "rllm.backend=transformers", NO_BETA[0]]) == 2
    )
    captured = capsys.readouterr()
    assert "needs option 'dro_beta'" in captured.err and "[val step 0]" not in captured.out
    assert not run.exists()


def test_the_losses_api_refuses_a_missing_required_option() -> None:
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch==2.13.0+cpu)")
    from rllm.losses import compute_policy_loss

    zeros = torch.zeros((1, 2))
    with pytest.raises(LossOptionError, match=r"needs option 'dro_beta'.*it has no default"):  # before the loss runs
        compute_policy_loss("dro", log_probs=zeros, old_log_probs=zeros, advantages=zeros, response_mask=zeros + 1)


class RequiresScale:
    """An estimator whose option has no usable default."""

    @hookimpl
    def rllm_register_estimators(self, register: Any) -> None:
        register(
            "scaled",
            lambda rewards, scale: [np.asarray(group) * scale for group in rewards],
            options=[Option("scale", (float,), None, "the factor (required)", required=True)],
        )


def test_an_estimator_option_declared_required_is_refused_when_missing(plugin_manager: PluginManager) -> None:
    import rllm

    plugin_manager.register(RequiresScale(), Source("plugin", "scaled", "rllm-scaled", "1.0"))
    with pytest.raises(
        EstimatorOptionError, match=r"Estimator 'scaled' \(.*\) needs option 'scale'.*estimator_options"
    ):
        rllm.compute_advantages("scaled", [1.0, 2.0], [0, 0])
    assert list(rllm.compute_advantages("scaled", [1.0, 2.0], [0, 0], scale=3)) == [3.0, 6.0]
    with pytest.raises(ConfigError, match="needs option 'scale'"):
        load_config(overrides=["rllm.algorithm.adv_estimator=scaled"])
