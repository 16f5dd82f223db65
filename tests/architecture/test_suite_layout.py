"""The suite's own layout: pytest (rootdir import mode) imports each test module by its basename.

Two test files with one basename in different folders make collection stop with "import file
mismatch", so every test module's file name is unique across ``tests/``.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_test_module_basenames_are_unique() -> None:
    by_name: dict[str, list[str]] = defaultdict(list)
    for path in TESTS.rglob("test_*.py"):
        if "fixtures" in path.relative_to(TESTS).parts:
            continue
        by_name[path.name].append(str(path.relative_to(TESTS)))
    clashes = {name: sorted(paths) for name, paths in by_name.items() if len(paths) > 1}
    assert clashes == {}, f"rename one of each pair (pytest imports test modules by basename): {clashes}"


PROBED = ("vllm", "deepspeed", "flash_attn", "liger_kernel", "wandb", "mlflow", "tensorboard", "tensorboardX")
"""Packages that transformers, TRL and the trackers probe for with ``importlib`` to switch features on."""


def test_no_test_folder_is_named_like_a_package_a_library_probes_for() -> None:
    # pytest puts tests/ on sys.path, so a folder tests/vllm is a namespace package "vllm" wherever vLLM is
    # absent: TRL then thinks vLLM is installed and fails reading its version, at import
    folders = {path.name for path in TESTS.iterdir() if path.is_dir()}
    assert folders.isdisjoint(PROBED), f"rename {sorted(folders & set(PROBED))} (it shadows the package)"
