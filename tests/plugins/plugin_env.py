"""A virtual environment with real plugin distributions pip-installed, and ways to run rllm in it.

It holds rllm, the example plugin from plugins/example and every fixture plugin in
tests/fixtures/plugins; environment switches select which of them a process loads.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "plugins"
FIXTURE_PLUGINS = sorted(path.name for path in FIXTURES.iterdir() if (path / "pyproject.toml").is_file())
DISTRIBUTIONS = [ROOT, ROOT / "plugins" / "example", *(FIXTURES / name for name in FIXTURE_PLUGINS)]


class Env:
    """A virtual environment and ways to run rllm in it with a clean ``RLLM_*`` environment."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.bin = path / ("Scripts" if os.name == "nt" else "bin")
        self.python = str(self.bin / "python")
        self.rllm = str(self.bin / "rllm")

    def run(self, args: list[str], *, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess[str]:
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("RLLM_", "PYTHON"))}
        return subprocess.run(
            args, capture_output=True, text=True, env={**clean, **env}, timeout=300, cwd=cwd or self.path
        )

    def py(self, code: str, **env: str) -> subprocess.CompletedProcess[str]:
        return self.run([self.python, "-c", textwrap.dedent(code)], **env)

    def py_json(self, code: str, **env: str) -> Any:
        done = self.py(code, **env)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.strip().splitlines()[-1])

    def plugins(self, **env: str) -> dict[str, dict[str, Any]]:
        done = self.run([self.rllm, "plugins", "--json"], **env)
        assert done.returncode == 0, done.stderr
        return {p["name"]: p for p in json.loads(done.stdout)}

    def train(self, out: Path, *overrides: str, **env: str) -> subprocess.CompletedProcess[str]:
        """A short ``rllm train`` run writing its metrics to ``out``."""
        return self.run(
            [
                self.rllm,
                "train",
                "--no-progress",
                "rllm.trainer.total_batches=2",
                "rllm.trainer.test_freq=0",
                "rllm.trainer.val_before_train=false",
                f"rllm.trainer.output_dir={out}",
                "rllm.trainer.logger=[jsonl]",
                *overrides,
            ],
            **env,
        )


def train_records(out: Path) -> list[dict[str, Any]]:
    """The training steps' metrics of a run."""
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [r for r in records if r["kind"] == "train"]
