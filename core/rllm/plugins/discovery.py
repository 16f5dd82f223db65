"""Finding plugins: the ``rllm.estimators`` entry points installed, read from metadata without importing them.

``import rllm`` runs :func:`discover_plugins` and nothing heavier; the manager imports the
plugins the first time a registry is used.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Literal

if sys.version_info >= (3, 12):
    from importlib import metadata
else:  # pragma: no cover - exercised on older interpreters
    import importlib_metadata as metadata

ENTRY_POINT_GROUP = "rllm.estimators"
BUILTIN_PLUGIN = "builtin"
BUILTIN_DISTRIBUTION = "rllm"

SourceKind = Literal["builtin", "plugin", "runtime"]


@dataclass(frozen=True)
class Source:
    """Who registered an entry: a plugin (with its distribution) or user code."""

    kind: SourceKind
    plugin: str
    distribution: str | None = None
    version: str | None = None

    def describe(self) -> str:
        if self.kind == "runtime":
            return f"user code ({self.plugin})"
        dist = f", distribution {self.distribution} {self.version or ''}".rstrip() if self.distribution else ""
        label = "built-in plugin" if self.kind == "builtin" else "plugin"
        return f"{label} '{self.plugin}'{dist}"


@dataclass(frozen=True)
class Discovered:
    """An ``rllm.estimators`` entry point found in the metadata, not yet imported."""

    entry_point: Any
    source: Source


def _normalise(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


_discovered: list[Discovered] | None = None


def discover_plugins() -> list[Discovered]:
    """The ``rllm.estimators`` entry points installed, built-ins first; reads metadata only, imports nothing.

    The ``builtin`` entry point of the ``rllm`` distribution is the built-in tier. The same entry point seen
    twice (a distribution visible twice on ``sys.path``) is kept once; two distributions using
    one entry-point name are told apart as ``name@distribution``.
    """
    global _discovered
    if _discovered is None:
        found: dict[tuple[str, str], Discovered] = {}
        names: set[str] = set()
        for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
            if (ep.name, ep.value) in found:
                continue
            dist = getattr(ep, "dist", None)
            dist_name = dist.metadata["Name"] if dist is not None else None
            own = dist_name is not None and _normalise(dist_name) == BUILTIN_DISTRIBUTION
            builtin = own and ep.name == BUILTIN_PLUGIN  # rllm's other entry points (fast) are ordinary plugins
            plugin_name = ep.name if ep.name not in names else f"{ep.name}@{dist_name}"
            names.add(plugin_name)
            kind: SourceKind = "builtin" if builtin else "plugin"
            found[(ep.name, ep.value)] = Discovered(ep, Source(kind, plugin_name, dist_name, dist and dist.version))
        _discovered = sorted(found.values(), key=lambda d: (d.source.kind != "builtin", d.source.plugin))
    return _discovered
