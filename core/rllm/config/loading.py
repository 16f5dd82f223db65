"""Build a run configuration: schema defaults, then user files, then command-line overrides.

Every key a user writes must exist in the schema (:mod:`rllm.config.schema`, plus the
sections plugins declare; :mod:`rllm.config.unknown_keys`), so a typo fails loudly with the
close match instead of being silently ignored; every value is checked against its key's
type, range and choices before anything runs. Overrides follow Hydra's grammar
(:mod:`rllm.config.overrides`); aliases and interpolations are bounded
(:mod:`rllm.config.expansion`).
"""

from __future__ import annotations

import copy
import hashlib
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from rllm.config.core_keys import why_missing
from rllm.config.dotted import nest_dotted
from rllm.config.expansion import (
    _ALIAS_NODES,
    MAX_DEPTH,
    MAX_EXPANSION,
    _alias_bound,
    aliases_overflow,
    check_expansion,
)
from rllm.config.names import check_run_name
from rllm.config.overrides import _apply, _one_line, _select, is_override, parse_value
from rllm.config.schema import CORE_KEYS, ConfigKey, Schema, section_keys
from rllm.config.unhonoured import warn_switched_off
from rllm.config.unknown_keys import check_keys
from rllm.contract.options import PRESET_NAMES
from rllm.errors import ConfigError, PluginWarning

__all__ = [
    "CONFIG_FILE",
    "MAX_DEPTH",
    "MAX_EXPANSION",
    "check_expansion",
    "check_keys",
    "current_schema",
    "default_config",
    "is_override",
    "load_config",
    "parse_value",
    "save_config",
    "validate_config",
]

CONFIG_FILE = "config.yaml"
"""Name of the resolved configuration every run writes into its run directory."""


# -- the schema in force ---------------------------------------------------------------------
_schema_cache: dict[tuple[int, tuple[str, ...]], Schema] = {}


def current_schema() -> Schema:
    """rllm's keys plus the sections the loaded plugins declare (recomputed when plugins change)."""
    from rllm.plugins.manager import get_plugin_manager

    manager = get_plugin_manager()
    cache_key = (id(manager.hooks), tuple(name for name, _ in manager.hooks.list_name_plugin()))
    schema = _schema_cache.get(cache_key)
    if schema is None:
        schema = _schema_cache[cache_key] = _plugin_schema(manager)
    return schema


def _plugin_schema(manager: Any) -> Schema:
    """The schema with every section the plugins declared (through the manager's hook runner), in load order."""
    keys = list(CORE_KEYS)
    taken = {key.path for key in keys} | Schema(tuple(keys)).sections()
    open_sections: set[str] = set()
    registry = manager.config_sections
    for info in manager.plugins.values():
        for section in info.config_sections:
            declared = next(c.target for c in registry.claims(section) if c.source.plugin == info.name)
            clash = [path for path in taken if path == section or path.startswith(section + ".")]
            if section in taken or clash or any(section.startswith(path + ".") for path in open_sections):
                warnings.warn(
                    f"plugin {info.name!r} declares config section {section!r}, which is already "
                    "taken by rllm or another plugin; the declaration is ignored.",
                    PluginWarning,
                    stacklevel=2,
                )
                continue
            if declared is None:
                open_sections.add(section)
            else:
                keys.extend(section_keys(section, declared))
            taken |= {section}
    return Schema(tuple(keys), frozenset(open_sections))


def default_config() -> DictConfig:
    """The schema's defaults, as a fresh DictConfig."""
    return OmegaConf.create(current_schema().defaults())


# -- layers ----------------------------------------------------------------------------------
def _as_layer(source: DictConfig | Mapping[str, Any] | str | Path) -> tuple[DictConfig, str]:
    if isinstance(source, DictConfig):
        return source, "the given config"
    if isinstance(source, Mapping):
        return OmegaConf.create(dict(source)), "the given config"
    path = Path(source)
    if path.is_dir():
        raise ConfigError(
            f"Config file {str(path)!r} is a folder; give a YAML file (e.g. {str(path / CONFIG_FILE)!r})."
        )
    if not path.is_file():
        raise ConfigError(f"Config file {str(path)!r} does not exist.")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"Config file {str(path)!r} is not UTF-8 text ({exc.reason} at byte {exc.start}).") from None
    except OSError as exc:
        raise ConfigError(f"Config file {str(path)!r} could not be read: {exc.strerror}.") from None
    if aliases_overflow(text):
        raise _alias_bomb(path)
    try:
        loaded = OmegaConf.create(text, **_alias_bound(text)) if text.strip() else OmegaConf.create({})
    except AssertionError:  # OmegaConf's own check: the document is a scalar, not a container
        raise ConfigError(
            f"Config file {str(path)!r} holds a single value, not a mapping of keys; write `key: value` lines "
            "(`rllm config` prints a complete example)."
        ) from None
    except yaml.YAMLError as exc:
        if "expan" in str(exc):
            raise _alias_bomb(path) from None
        raise ConfigError(f"Config file {str(path)!r} is not valid YAML: {_one_line(exc)}") from None
    except (OmegaConfBaseException, ValueError) as exc:
        raise ConfigError(f"Config file {str(path)!r} could not be read: {_one_line(exc)}") from None
    if isinstance(loaded, ListConfig):
        raise ConfigError(f"Config file {str(path)!r} holds a list; it must hold a mapping of keys.")
    return loaded, f"config file {str(path)!r}"


def _alias_bomb(path: Path) -> ConfigError:
    return ConfigError(
        f"Config file {str(path)!r} uses YAML aliases that expand to more than {_ALIAS_NODES:,} nodes "
        "beyond the file's own; write those values out instead of repeating anchors."
    )


# -- values ----------------------------------------------------------------------------------
def validate_config(config: DictConfig, schema: Schema | None = None) -> DictConfig:
    """Check every value against the schema, raising a one-line :class:`ConfigError` naming the key.

    Numbers given for string keys become strings; nothing else is converted. A key set while
    its switch is off is said (:mod:`rllm.config.unhonoured`).
    """
    schema = schema or current_schema()
    for section in sorted(schema.sections() | schema.open_sections):
        present, node = _select(config, section)
        if present and not isinstance(node, DictConfig):
            raise ConfigError(f"{section} must be a mapping of keys; got {_plain(node)!r}.")
    check_expansion(config)
    try:
        resolved = OmegaConf.to_container(config, resolve=True)
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", None)
        where = f"{key}: " if key else ""
        raise ConfigError(f"{where}could not resolve an interpolation: {str(exc).splitlines()[0]}") from None
    for key in schema.keys:
        value = _lookup(resolved, key.path)
        checked = key.check(value)
        if checked is not value and not OmegaConf.is_interpolation(*_parent_and_leaf(config, key.path)):
            OmegaConf.update(config, key.path, checked, merge=False)
    _check_presets(_lookup(resolved, "rllm.algorithm.estimator_options"))
    _check_estimator_choices(_lookup(resolved, "rllm.algorithm"))
    for key in ("rllm.trainer.project_name", "rllm.trainer.experiment_name"):
        check_run_name(key, _lookup(resolved, key))
    _check_run_choices(config)
    warn_switched_off(config, schema)
    return config


def _check_run_choices(config: DictConfig) -> None:
    """What a run checks when it starts, checked here: each estimator in use with its options, each loss with its.

    The same calls as the collection step (``options_for``, ``ambient_options``) and the torch
    backends (:meth:`rllm.losses.LossSettings.from_algorithm`), so ``rllm config`` refuses a
    misspelt option or a loss without its required option before ``rllm train`` writes anything.
    """
    from rllm.config.algorithm import AlgorithmConfig, estimator_name
    from rllm.losses import LossSettings
    from rllm.plugins.manager import get_plugin_manager
    from rllm.plugins.options import resolve_options

    with warnings.catch_warnings():  # read for checking only: the run reads it again and says its warnings then
        warnings.simplefilter("ignore")
        algorithm = AlgorithmConfig.from_config(config)
    for name in dict.fromkeys(map(estimator_name, [algorithm.estimator, *algorithm.estimator_map.values()])):
        entry = get_plugin_manager().estimators.resolve(name)
        options = algorithm.options_for(entry.name)
        resolve_options(entry.name, entry.declaration, options, algorithm.ambient_options(), entry.source.describe())
    for role in ("", *algorithm.loss_fn_map):
        if algorithm.loss_fn_for(role) is not None:
            LossSettings.from_algorithm(algorithm, role)


def _plain(node: Any) -> Any:
    return node._value() if hasattr(node, "_value") else node


def _lookup(tree: Any, path: str) -> Any:
    for part in path.split("."):
        tree = tree.get(part) if isinstance(tree, dict) else None
    return tree


def _parent_and_leaf(config: DictConfig, path: str) -> tuple[DictConfig, str]:
    parent, _, leaf = path.rpartition(".")
    return (OmegaConf.select(config, parent) if parent else config), leaf


def _preset_names() -> list[str]:
    return sorted(PRESET_NAMES)


def _check_estimator_choices(algorithm: Mapping[str, Any]) -> None:
    """Role keys are strings, the map names registered estimators, per-estimator options fit their estimator.

    Checked when the config is loaded, so ``rllm config`` refuses what a run would refuse later.
    """
    from rllm.plugins.manager import get_plugin_manager
    from rllm.plugins.options import resolve_options

    base = "rllm.algorithm"
    for role, value in (algorithm.get("estimator_map") or {}).items():
        if not isinstance(role, str):
            raise ConfigError(
                f"{base}.estimator_map: the role {role!r} is not a string ({type(role).__name__}); roles are "
                f"strings, so quote it ('{role}': ...)."
            )
        chosen = value[0] if isinstance(value, list | tuple) and value else value
        ConfigKey(
            f"{base}.estimator_map.{role}", "str", None, "", names=_registered_estimators, explain=why_missing
        ).check(chosen)
    known = set(_registered_estimators())
    for name, options in (algorithm.get("estimator_options") or {}).items():
        if name in known and isinstance(options, Mapping):
            entry = get_plugin_manager().estimators.resolve(name)
            resolve_options(entry.name, entry.declaration, options, {}, entry.source.describe())


def _registered_estimators() -> list[str]:
    from rllm.plugins.manager import get_plugin_manager

    return get_plugin_manager().estimators.names()


def _check_presets(options: Mapping[str, Any]) -> None:
    """``estimator_options.preset`` (shared or per estimator) must name a known preset."""
    base = "rllm.algorithm.estimator_options"
    places = [(base, options)] + [(f"{base}.{k}", v) for k, v in options.items() if isinstance(v, Mapping)]
    for path, mapping in places:
        if "preset" in mapping:
            ConfigKey(f"{path}.preset", "str", None, "", names=_preset_names).check(mapping["preset"])


def _check_sections(layer: DictConfig, schema: Schema, source: str) -> None:
    """A section a layer sets to a list or a scalar is refused before merging (OmegaConf raises TypeError)."""
    for section in sorted(schema.sections() | schema.open_sections):
        present, node = _select(layer, section)
        if present and not isinstance(node, DictConfig) and _plain(node) is not None:
            raise ConfigError(f"{section} must be a mapping of keys; got {_short(_plain(node))}. Fix it in {source}.")


def _short(value: Any, limit: int = 60) -> str:
    text = repr(OmegaConf.to_container(value) if isinstance(value, ListConfig) else value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# -- the public entry points ----------------------------------------------------------------
def load_config(
    *sources: DictConfig | Mapping[str, Any] | str | Path,
    overrides: Iterable[str] = (),
) -> DictConfig:
    """Merge ``sources`` (configs or YAML paths) and ``overrides`` onto the defaults, then check every value.

    A config this function produced, given back unchanged and alone (``rllm train`` hands the one it
    loaded to the trainer, which loads what it is given), is copied without checking it again.
    """
    schema = current_schema()
    overrides = list(overrides)
    given = sources[0] if len(sources) == 1 and not overrides else None
    if isinstance(given, DictConfig) and _checked.get(_fingerprint(given)) is schema:
        return copy.deepcopy(given)
    config = OmegaConf.create(schema.defaults())
    for layer, source in [_as_layer(source) for source in sources]:
        layer = _nest_layer(layer, schema, source)
        check_keys(layer, schema, source)
        _check_sections(layer, schema, source)
        try:
            config = OmegaConf.merge(config, layer)  # type: ignore[assignment]
        except OmegaConfBaseException as exc:
            raise ConfigError(f"Could not apply {source}: {_one_line(exc)}") from None
    for override in overrides:
        _apply(config, override, schema)
    config = validate_config(config, schema)
    _checked[_fingerprint(config)] = schema
    while len(_checked) > _CHECKED_KEPT:
        del _checked[next(iter(_checked))]
    return config


_CHECKED_KEPT = 16
_checked: dict[str, Schema] = {}
"""The configs :func:`load_config` produced, by content, with the schema they were checked against (the newest kept):
one given back unchanged under the same schema (the same plugins) needs no second check."""


def _fingerprint(config: DictConfig) -> str:
    """The config's content, interpolations unresolved, as a digest: any change to a key or value changes it."""
    return hashlib.sha256(OmegaConf.to_yaml(config).encode()).hexdigest()


def _nest_layer(layer: DictConfig, schema: Schema, source: str) -> DictConfig:
    """The layer with its dotted keys as nested keys (:mod:`rllm.config.dotted`), interpolations kept."""
    nested = nest_dotted(OmegaConf.to_container(layer, resolve=False), schema.open_paths(), source)  # type: ignore[arg-type]
    return layer if nested is None else OmegaConf.create(nested)


def save_config(config: DictConfig, run_dir: Path) -> Path:
    """Write ``config`` as ``run_dir/config.yaml``; ``rllm train -c`` on it runs (resumes) the same experiment."""
    from rllm.io import write_atomic

    path = run_dir / CONFIG_FILE
    header = (
        "# The configuration of this run, as merged from defaults, files and overrides.\n"
        f"# Reproduce it with: rllm train -c {path}\n"
    )
    write_atomic(path, header + OmegaConf.to_yaml(config))
    return path
