"""Estimator names (rLLM's enum, from the floor, or plain strings) and run names, as config values."""

from __future__ import annotations

import os
from enum import Enum

from rllm.contract.names import rLLMAdvantageEstimator
from rllm.errors import ConfigError

EstimatorName = rLLMAdvantageEstimator | str


def estimator_name(name: EstimatorName) -> str:
    """The registry key for an enum member or a plain string."""
    if isinstance(name, Enum):
        return str(name.value)
    if not isinstance(name, str):
        raise ConfigError(f"An estimator name must be a string, got {type(name).__name__}: {name!r}.")
    return name


NAME_MAX = 255
"""The longest file name, in bytes, the common file systems hold (ext4, APFS; NTFS counts UTF-16 units)."""


def check_run_name(key: str, value: object) -> str:
    """``value`` as a single directory name, so ``runs/{project}/{experiment}`` stays inside ``runs/``."""
    name = str(value)
    bad = (
        not name
        or name in (".", "..")
        or "/" in name
        or "\\" in name
        or "\0" in name
        or (os.altsep is not None and os.altsep in name)
    )
    if bad:
        raise ConfigError(
            f"{key}={name!r} is not a plain name: it may not be empty, '.' or '..', nor contain '/', '\\' or NUL, "
            "so the run stays inside runs/. Use a name like 'grpo-lr1e-3', or set rllm.trainer.output_dir "
            "to put the run elsewhere."
        )
    size = len(name.encode("utf-8", "surrogatepass"))
    if size > NAME_MAX:
        raise ConfigError(
            f"{key} is {size} bytes long ({name[:20]!r}...); it names a directory, and a file name holds at most "
            f"{NAME_MAX} bytes. Use a shorter name."
        )
    return name
