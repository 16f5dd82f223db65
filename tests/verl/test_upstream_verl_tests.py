"""rLLM's own verl-backend tests (unmodified copies in tests/fixtures/rllm_upstream/tests) run on this project's rllm.

They run in a pytest of their own, on this checkout's ``core`` and ``plugins``; every test passes
but the ones docs/verl.md lists ("rLLM's verl-backend tests"), and each of those fails for the
reason the table gives, here as the text of its error.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from types import SimpleNamespace

import pytest
from extras import skip_module_without

skip_module_without("torch", "verl", "ray", install="pip install torch==2.13.0+cpu 'rllm[verl]' (CI does)")

ROOT = Path(__file__).resolve().parents[2]
UPSTREAM = ROOT / "tests" / "fixtures" / "rllm_upstream" / "tests"
DOC = ROOT / "docs" / "verl.md"

EXPECTED_FAILURES = {  # test id: text its error holds (docs/verl.md says why)
    **{
        f"test_verl_policy_loss.py::TestVerlActorPatch::{name}": "verl 0.9.1 does not have"
        for name in (
            "test_patch_is_idempotent",
            "test_override_applied_and_restored",
            "test_no_override_passes_through",
        )
    },
    **{
        f"trainer/verl/test_validate_config.py::{name}": "'VerlBackend' object has no attribute"
        for name in (
            "test_partial_rollout_with_remote_runtime_raises",
            "test_partial_rollout_disabled_with_remote_runtime_ok",
            "test_partial_rollout_without_remote_runtime_ok",
        )
    },
    "unified_trainer/test_verl_transform.py::test_transform_metrics_handle_all_filtered_groups": (
        "'TransformConfig' object is not callable"
    ),
    "unified_trainer/test_verl_transform.py::TestRolloutLogProbsPropagation::"
    "test_empty_logprobs_no_rollout_log_probs_key": "has 0 logprobs for 3 completion ids",
    "trainer/test_sft_dispatcher.py": "cannot import name 'Dataset' from 'rllm.data'",
}
PASSING = 62
"""How many of the upstream tests pass (all the others are EXPECTED_FAILURES)."""


def _test_id(case: ElementTree.Element) -> str:
    """``path::Class::name`` of a junit test case (a collection error is the file's path)."""
    parts = (case.get("classname") or "").split(".")
    name = case.get("name") or ""
    if not parts[0] and name:  # a module that failed to import
        return name.replace(".", "/").removesuffix("/py") + ".py"
    module = [p for p in parts if not p[:1].isupper()]
    classes = [p for p in parts if p[:1].isupper()]
    return "::".join(["/".join(module) + ".py", *classes, name])


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Each upstream test's id and its error text ("" when it passed)."""
    where = tmp_path_factory.mktemp("upstream")
    shutil.copytree(UPSTREAM, where / "tests")
    report = where / "report.xml"
    paths = [ROOT / "core", *sorted(p for p in (ROOT / "plugins").iterdir() if p.is_dir())]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, paths))}
    env.pop("RLLM_DISABLED_PLUGINS", None)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=", "--rootdir", "tests"]
    command += ["--import-mode=importlib", "--continue-on-collection-errors", f"--junitxml={report}", "tests"]
    subprocess.run(command, cwd=where, env=env, capture_output=True, text=True, timeout=600)
    found = {}
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        problem = case.find("failure") if case.find("failure") is not None else case.find("error")
        assert case.find("skipped") is None, f"{_test_id(case)} was skipped: no upstream test may be skipped"
        found[_test_id(case)] = "" if problem is None else (problem.get("message", "") + (problem.text or ""))
    return found


@pytest.mark.slow
def test_every_upstream_test_passes_but_the_documented_ones(outcomes: dict[str, str]) -> None:
    failed = {test: text for test, text in outcomes.items() if text}
    assert sorted(failed) == sorted(EXPECTED_FAILURES), "\n".join(f"{t}: {x[:300]}" for t, x in failed.items())
    for test, reason in EXPECTED_FAILURES.items():
        assert reason in failed[test], (test, failed[test][:500])
    assert len(outcomes) - len(failed) == PASSING


def test_each_expected_failure_is_in_the_docs_table() -> None:
    table = DOC.read_text(encoding="utf-8").split("### rLLM's verl-backend tests", 1)[1].split("\n## ", 1)[0]
    for test in EXPECTED_FAILURES:
        assert f"`{test.rsplit('::', 1)[-1].rsplit('/', 1)[-1]}`" in table, test


def test_rllm_paths_are_the_plugin_modules() -> None:
    import rllm.trainer.tinker.tinker_policy_trainer as tinker_names
    import rllm.trainer.verl.transform as transform
    import rllm.trainer.verl.utils as utils
    import rllm_tinker.upstream
    import rllm_verl.upstream.transform
    import rllm_verl.upstream.utils

    assert utils is rllm_verl.upstream.utils and transform is rllm_verl.upstream.transform
    assert tinker_names is rllm_tinker.upstream


def test_every_rllm_key_sync_config_pairs_is_a_key_of_this_project() -> None:
    from rllm.config import core_keys
    from rllm_verl.upstream.utils import EPS_CLIP, EPS_CLIP_HIGH, SHARED_KEYS, TOTAL_STEPS

    tables = [table for table in vars(core_keys).values() if isinstance(table, tuple)]
    keys = {key.name for table in tables for key in table if hasattr(key, "name")}
    wanted = {rllm for _, rllm in SHARED_KEYS} | {TOTAL_STEPS[1], EPS_CLIP, EPS_CLIP_HIGH, "rllm.algorithm.lr_schedule"}
    assert wanted - keys == set()


def test_a_switched_off_plugin_makes_its_rllm_path_a_one_line_error() -> None:
    env = {**os.environ, "RLLM_DISABLED_PLUGINS": "verl"}
    code = "import rllm.trainer.verl.utils"
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    last = result.stderr.strip().splitlines()[-1]
    assert result.returncode != 0
    assert last.startswith("rllm.errors.PluginLoadError: rllm.trainer.verl.utils is the verl plugin's")
    assert "RLLM_DISABLED_PLUGINS" in last


def _episode(prompt: list[int], reply: list[int], reward: float) -> object:
    from rllm.types import Episode, Step, Trajectory

    step = Step(prompt_ids=prompt, response_ids=reply, logprobs=[-0.5] * len(reply), reward=reward)
    return Episode(id="task:0", trajectories=[Trajectory(steps=[step], reward=reward)])


ENGINE = SimpleNamespace(tokenizer=SimpleNamespace(pad_token_id=9), processor=None)
"""What the transform reads of rLLM's rollout engine."""


def test_the_rewards_sit_on_each_rows_last_response_token() -> None:
    from rllm.trainer.verl.transform import transform_episodes_to_dataproto

    batch = transform_episodes_to_dataproto([_episode([1, 2], [3, 4, 5], 0.75)], ENGINE, 4, 5)
    assert batch.batch["traj_rewards"][0].tolist() == [0.0, 0.0, 0.75, 0.0, 0.0]
    assert batch.batch["prompts"][0].tolist() == [9, 9, 1, 2] and batch.batch["responses"][0].tolist() == [
        3,
        4,
        5,
        9,
        9,
    ]
    assert batch.batch["attention_mask"][0].tolist() == [0, 0, 1, 1, 1, 1, 1, 0, 0]
    assert batch.batch["position_ids"][0].tolist()[2:7] == [0, 1, 2, 3, 4]


def test_a_row_longer_than_the_maximum_is_a_one_line_error_not_a_cut() -> None:
    from rllm.errors import DataError
    from rllm.trainer.verl.transform import transform_episodes_to_dataproto

    with pytest.raises(DataError, match=r"response of 3 tokens, over max_response_length=2; raise") as error:
        transform_episodes_to_dataproto([_episode([1, 2], [3, 4, 5], 1.0)], ENGINE, 4, 2)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("key", ["rllm.remote_runtime.enabled", "rllm.async_training.partial_rollout"])
def test_the_keys_rllms_validate_config_tests_vary_are_refused_when_loaded(key: str) -> None:
    """Why test_validate_config.py fails here (docs/verl.md): its keys never reach a backend."""
    from rllm.config import load_config
    from rllm.errors import ConfigError

    with pytest.raises(ConfigError, match=rf"'{key}' in override .* which rllm does not have; remove it") as error:
        load_config(overrides=[f"{key}=true"])
    assert "\n" not in str(error.value)
