"""The configuration schema: the keys in force, rllm's own plus the sections plugins declare.

The shipped defaults, ``rllm config --keys`` and the checks run before anything starts all
read :data:`CORE_KEYS` (plus the sections plugins declare through the
``rllm_register_config_sections`` hook), so a key cannot be documented, defaulted and
validated three different ways. A key and its value checks live in :mod:`rllm.config.keys`,
rllm's table of keys in :mod:`rllm.config.core_keys`; both are importable from here too.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from rllm.config.core_keys import CORE_KEYS
from rllm.config.keys import ConfigKey, KeyType
from rllm.errors import ConfigError

__all__ = ["CORE_KEYS", "ConfigKey", "KeyType", "Schema", "section_keys"]


@dataclass(frozen=True)
class Schema:
    """The keys in force: rllm's own plus every plugin-declared section."""

    keys: tuple[ConfigKey, ...]
    open_sections: frozenset[str] = frozenset()
    """Plugin sections whose keys the plugin chooses (not checked here)."""

    def by_path(self) -> dict[str, ConfigKey]:
        return {key.path: key for key in self.keys}

    def sections(self) -> set[str]:
        """Every dotted prefix that holds keys (``rllm``, ``rllm.trainer``, ...)."""
        out: set[str] = set()
        for path in [key.path for key in self.keys] + list(self.open_sections):
            parts = path.split(".")
            out.update(".".join(parts[:i]) for i in range(1, len(parts)))
        return out

    def open_paths(self) -> frozenset[str]:
        """Paths whose children are user-chosen names: mapping keys and open plugin sections."""
        return self.open_sections | {key.path for key in self.keys if key.type == "mapping"}

    def defaults(self) -> dict[str, Any]:
        """The nested mapping of every default (interpolations kept as written)."""
        tree: dict[str, Any] = {}
        for key in self.keys:
            *parents, leaf = key.path.split(".")
            node = tree
            for part in parents:
                node = node.setdefault(part, {})
            node[leaf] = _copy(key.default)
        for path in self.open_sections:
            *parents, leaf = path.split(".")
            node = tree
            for part in parents:
                node = node.setdefault(part, {})
            node.setdefault(leaf, {})
        return tree


def _copy(value: Any) -> Any:
    if isinstance(value, list):
        return list(value)
    if isinstance(value, dict):
        return dict(value)
    return value


def section_keys(section: str, keys: Iterable[ConfigKey]) -> list[ConfigKey]:
    """Plugin keys with their paths made absolute under ``section``."""
    out = []
    for key in keys:
        if not isinstance(key, ConfigKey):
            raise ConfigError(f"Config section {section!r} declares {key!r}, which is not a rllm.config.ConfigKey.")
        out.append(replace(key, name=f"{section}.{key.name}"))
    return out
