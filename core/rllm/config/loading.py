"""Build a run configuration: shipped defaults, then user files, then ``key=value`` overrides.

Every key a user writes must exist in the defaults, so a typo fails loudly with the close
match instead of being silently ignored. Mappings whose keys are free (role names, estimator
options) are listed in :data:`OPEN_KEYS`.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Iterator, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from rllm.errors import ConfigError

OPEN_KEYS = frozenset({"rllm.algorithm.estimator_map", "rllm.algorithm.estimator_options"})
"""Config paths whose children are user-chosen names, not schema keys."""

_extra_open_keys: set[str] = set()


def register_open_key(path: str) -> None:
    """Let a plugin declare a config mapping whose keys it chooses (e.g. its backend's options)."""
    _extra_open_keys.add(path)


def default_config() -> DictConfig:
    """The shipped defaults, as a fresh DictConfig."""
    text = resources.files("rllm.config").joinpath("defaults.yaml").read_text(encoding="utf-8")
    return OmegaConf.create(text)  # type: ignore[return-value]


def _leaf_paths(node: Any, prefix: str = "") -> Iterator[str]:
    if isinstance(node, DictConfig | Mapping):
        keys = node.keys()
        for key in keys:
            path = f"{prefix}.{key}" if prefix else str(key)
            yield path
            if _is_open(path):
                continue
            child = node._get_node(key) if isinstance(node, DictConfig) else node[key]
            if isinstance(child, DictConfig | Mapping):
                yield from _leaf_paths(child, path)


def _suggest(path: str, known: Iterable[str]) -> str:
    known = sorted(known)
    close = difflib.get_close_matches(path, known, n=1, cutoff=0.6)
    if not close:
        leaf = path.rsplit(".", 1)[-1]
        by_leaf = {k.rsplit(".", 1)[-1]: k for k in known}
        leaf_match = difflib.get_close_matches(leaf, list(by_leaf), n=1, cutoff=0.75)
        close = [by_leaf[leaf_match[0]]] if leaf_match else []
    return f" Did you mean '{close[0]}'?" if close else ""


def _is_open(path: str) -> bool:
    return any(path == key or path.startswith(key + ".") for key in OPEN_KEYS | _extra_open_keys)


def check_keys(layer: DictConfig, known: set[str], source: str) -> None:
    """Raise :class:`ConfigError` for the first key of ``layer`` that the schema lacks."""
    for path in _leaf_paths(layer):
        if path not in known and not _is_open(path):
            raise ConfigError(f"Unknown config key '{path}' in {source}.{_suggest(path, known)}")


def _as_layer(source: DictConfig | Mapping[str, Any] | str | Path) -> tuple[DictConfig, str]:
    if isinstance(source, DictConfig):
        return source, "the given config"
    if isinstance(source, Mapping):
        return OmegaConf.create(dict(source)), "the given config"
    path = Path(source)
    if not path.is_file():
        raise ConfigError(f"Config file {str(path)!r} does not exist.")
    try:
        loaded = OmegaConf.load(path)
    except (OmegaConfBaseException, ValueError, OSError) as exc:  # yaml errors are ValueError-like
        raise ConfigError(f"Config file {str(path)!r} could not be read: {exc}") from exc
    except Exception as exc:  # PyYAML's own parser errors
        raise ConfigError(f"Config file {str(path)!r} is not valid YAML: {exc}") from exc
    if isinstance(loaded, ListConfig):
        raise ConfigError(f"Config file {str(path)!r} holds a list; it must hold a mapping of keys.")
    return loaded, f"config file {str(path)!r}"


def load_config(
    *sources: DictConfig | Mapping[str, Any] | str | Path,
    overrides: Iterable[str] = (),
) -> DictConfig:
    """Merge ``sources`` (configs or YAML paths) and dot-list ``overrides`` onto the defaults."""
    config = default_config()
    known = set(_leaf_paths(config))
    layers = [_as_layer(source) for source in sources]
    overrides = list(overrides)
    if overrides:
        for item in overrides:
            if "=" not in item:
                raise ConfigError(f"Override {item!r} is not of the form key=value.")
        try:
            dotlist = OmegaConf.from_dotlist(overrides)
        except OmegaConfBaseException as exc:
            raise ConfigError(f"Overrides {overrides} could not be parsed: {exc}") from exc
        layers.append((dotlist, "the command-line overrides"))
    for layer, source in layers:
        check_keys(layer, known, source)
        try:
            config = OmegaConf.merge(config, layer)  # type: ignore[assignment]
        except OmegaConfBaseException as exc:
            raise ConfigError(f"Could not apply {source}: {exc}") from exc
    return config
