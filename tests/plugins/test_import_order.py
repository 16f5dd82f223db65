"""Importing rllm and its built-in plugin works in any order: import discovers, first use loads.

Each test is a fresh interpreter of the development environment (where rllm is installed with
its ``builtin`` entry point), so the order really is the first thing that happens.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

FIRST_IMPORTS = [
    "from rllm_builtin.estimators import mix",
    "import rllm_builtin.plugin",
    "import rllm.types",
    "import rllm",
]
# Rewards [1, 0, 0, 0] in one group: mean 1/4, population std sqrt(3)/4 = 0.4330127, eps 1e-6, so
# advantages 0.75 / 0.4330137 = 1.7320468 and -0.25 / 0.4330137 = -0.5773489.
STD = 3**0.5 / 4
GRPO = [0.75 / (STD + 1e-6)] + [-0.25 / (STD + 1e-6)] * 3


def run(code: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("RLLM_", "PYTHON"))}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=clean, timeout=120
    )


@pytest.mark.parametrize("first", FIRST_IMPORTS)
def test_grpo_whatever_is_imported_first(first: str) -> None:
    compute = "rllm.compute_advantages('grpo', [1.0, 0.0, 0.0, 0.0], [0] * 4).tolist()"
    done = run(f"{first}\nimport json, rllm\nprint(json.dumps({compute}))")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == pytest.approx(GRPO, rel=1e-12)
    assert abs(GRPO[0] - 1.7320468) < 1e-6 and abs(GRPO[1] + 0.5773489) < 1e-6
    assert "Warning" not in done.stderr


def test_import_rllm_imports_no_plugin_module() -> None:
    done = run(
        """
        import json, sys
        import rllm
        from rllm.plugins import discover_plugins
        found = [d.entry_point.value for d in discover_plugins()]
        modules = [*found, "rllm_builtin.embedded"]
        loaded = sorted(m for m in sys.modules if m.startswith(tuple(modules)))
        print(json.dumps({"builtin": found[0], "loaded": loaded, "manager": "rllm.plugins.manager" in sys.modules}))
        rllm.get_plugin_manager()
        print(json.dumps("rllm_builtin.plugin" in sys.modules))
        """
    )
    assert done.returncode == 0, done.stderr
    first, after = done.stdout.splitlines()
    assert json.loads(first) == {"builtin": "rllm_builtin.plugin", "loaded": [], "manager": False}
    assert json.loads(after) is True
