"""A pip-installed plugin adds a policy loss; two plugins claiming one loss name are a named conflict."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from plugin_env import Env

pytestmark = pytest.mark.slow

RUN_FIXTURE_LOSS = """
import json, sys
import numpy as np
from rllm.losses import compute_policy_loss, loss_entry
entry = loss_entry("fixture_pg")
before = "rllm_fixture_losses.loss" in sys.modules
loss, metrics = compute_policy_loss(
    "scaled_pg",
    log_probs=np.array([[-1.0, -2.0, -0.5]]),
    old_log_probs=np.zeros((1, 3)),
    advantages=np.array([[1.0, -1.0, 2.0]]),
    response_mask=np.array([[1.0, 1.0, 0.0]]),
    options={"scale": 3.0},
)
print(json.dumps([entry.alias_of, before, float(loss), metrics]))
"""


def test_an_installed_loss_is_listed_loaded_lazily_and_run_by_name(env: Env) -> None:
    alias_of, imported_before, loss, metrics = env.py_json(RUN_FIXTURE_LOSS, RLLM_PLUGINS="losses")
    assert alias_of == "scaled_pg" and imported_before is False
    # tokens 1 and 2 count: -(-1*1) - (-2*-1) = 1 - 2 = -1; mean over 2 tokens = -0.5; times scale 3
    assert loss == pytest.approx(-1.5)
    assert metrics == {"tokens": 2.0}
    listed = json.loads(env.run([env.rllm, "losses", "scaled_pg", "--json"], RLLM_PLUGINS="losses").stdout)
    assert listed[0]["distribution"] == "rllm-fixture-losses" and listed[0]["aliases"] == ["fixture_pg"]
    assert env.plugins(RLLM_PLUGINS="losses")["losses"]["losses"] == ["scaled_pg", "fixture_pg"]


def test_a_bad_option_of_an_installed_loss_is_one_line_naming_it(env: Env) -> None:
    done = env.py(
        "from rllm.losses import resolve_loss_options\nresolve_loss_options('scaled_pg', {'scal': 2.0})",
        RLLM_PLUGINS="losses",
    )
    last = done.stderr.strip().splitlines()[-1]
    assert "LossOptionError: Loss 'scaled_pg' (plugin 'losses', distribution rllm-fixture-losses 0.2.0)" in last
    assert "no option 'scal'. Did you mean 'scale'?" in last


def test_a_run_selecting_the_installed_loss_resolves_it_and_the_numpy_backend_refuses_it_by_name(
    env: Env, tmp_path: Path
) -> None:
    done = env.train(tmp_path / "run", "rllm.algorithm.loss_fn=fixture_pg", RLLM_PLUGINS="losses")
    assert done.returncode == 2
    assert "rllm.algorithm.loss_fn='fixture_pg' is not supported by the embedded backend" in done.stderr
    assert "'scaled_pg' of plugin 'losses'" in done.stderr
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_two_plugins_registering_one_loss_name_is_a_named_conflict(env: Env) -> None:
    done = env.py("from rllm.losses import get_loss\nget_loss('shared_loss')", RLLM_PLUGINS="conflict_a,conflict_b")
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("rllm.errors.LossConflictError: Loss name 'shared_loss' is registered by more than one")
    assert "rllm-fixture-conflict-a" in last and "rllm-fixture-conflict-b" in last
    alone = env.py(
        "from rllm.losses import loss_entry\nprint(loss_entry('shared_loss').source.plugin)", RLLM_PLUGINS="conflict_a"
    )
    assert alone.stdout.strip() == "conflict_a"
