"""The TRL versions the bridge is tested with, checked before TRL is imported (no torch, no TRL here)."""

from __future__ import annotations

from importlib import metadata

from rllm.errors import UnsupportedVersionError

TESTED = ("1.16",)
"""TRL release series the bridge drives (``rllm[trl]`` pins the same: ``trl>=1.16.0,<1.17``).

The bridge overrides two private methods of ``GRPOTrainer``, whose bodies change between TRL
releases, so any other series is refused rather than trained on silently wrong numbers.
"""


def check_trl_version(installed: str | None = None) -> str:
    """The installed TRL version (or ``installed``), if the bridge is tested with it; else one line naming it."""
    if installed is None:
        try:
            installed = metadata.version("trl")
        except metadata.PackageNotFoundError:
            raise UnsupportedVersionError(
                "The rllm TRL bridge needs TRL, which is not installed: pip install 'rllm[trl]'."
            ) from None
    series = ".".join(installed.split(".")[:2])
    if series not in TESTED:
        raise UnsupportedVersionError(
            f"The rllm TRL bridge is tested with TRL {', '.join(t + '.x' for t in TESTED)}; TRL {installed} is "
            f"installed: pip install 'rllm[trl]' (trl>={TESTED[0]}.0,<{_next(TESTED[-1])})."
        )
    return installed


def _next(series: str) -> str:
    major, minor = series.split(".")
    return f"{major}.{int(minor) + 1}"
