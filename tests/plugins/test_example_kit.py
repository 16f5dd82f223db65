"""The example plugin's own tests pass in a fresh environment holding only rllm and the example."""

from __future__ import annotations

import venv
from pathlib import Path

import pytest
from plugin_env import ROOT, Env

EXAMPLE = ROOT / "plugins" / "example"


@pytest.mark.slow  # two pip installs into a fresh environment
def test_example_plugin_passes_rllm_testing_from_a_fresh_install(tmp_path: Path) -> None:
    venv.create(tmp_path / "venv", with_pip=True)
    env = Env(tmp_path / "venv")
    pip = [env.python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    done = env.run([*pip, str(ROOT), f"{EXAMPLE}[test]"])
    assert done.returncode == 0, done.stdout + done.stderr
    # From a scratch folder, so the installed distributions are imported, not the source tree.
    done = env.run([env.python, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(EXAMPLE / "tests")], cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    summary = done.stdout.strip().splitlines()[-1]
    assert " passed" in summary and "failed" not in summary and "skipped" not in summary, summary
    assert int(summary.split()[0]) >= 30, summary  # 3 estimators x 2 inputs x at least 5 checks
