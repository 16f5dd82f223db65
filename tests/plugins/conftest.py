"""The plugin test environment, built once per test session (pip installs take a while)."""

from __future__ import annotations

import venv

import pytest
from plugin_env import DISTRIBUTIONS, Env


@pytest.fixture(scope="session")
def env(tmp_path_factory: pytest.TempPathFactory) -> Env:
    path = tmp_path_factory.mktemp("plugin-venv")
    venv.create(path, with_pip=True, clear=True)
    environment = Env(path)
    done = environment.run(
        [
            environment.python,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            *(str(d) for d in DISTRIBUTIONS),
        ]
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return environment
