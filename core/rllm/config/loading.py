"""Build a run configuration: schema defaults, then user files, then command-line overrides.

Every key a user writes must exist in the schema (:mod:`rllm.config.schema`, plus the
sections plugins declare), so a typo fails loudly with the close match instead of being
silently ignored; every value is checked against its key's type, range and choices before
anything runs. Overrides follow Hydra's grammar:

``key=value``
    set a key (a YAML value: ``3``, ``0.5``, ``true``, ``null``, ``[a,b]``, ``'quoted'``);
``+key=value``
    add a key that is not set yet (a role in ``estimator_map``, an estimator option; plain
    ``key=value`` adds one there too);
``++key=value``
    set a key whether or not it is set;
``~key`` or ``~key=value``
    remove a key (with a value: only if it currently has that value); a key of the schema
    goes back to its default.
"""

from __future__ import annotations

import difflib
import inspect
import re
import warnings
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, cast

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from rllm.config.schema import CORE_KEYS, ConfigKey, Schema, section_keys
from rllm.errors import ConfigError, PluginWarning
from rllm.plugins.options import PRESET_NAMES

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


# -- unknown keys ----------------------------------------------------------------------------
def _under(path: str, roots: Iterable[str]) -> bool:
    return any(path == root or path.startswith(root + ".") for root in roots)


def _paths(node: Any, open_paths: frozenset[str], prefix: str = "") -> Iterator[str]:
    """Every dotted path a layer sets, not descending into open mappings."""
    if isinstance(node, DictConfig | Mapping):
        for key in node:
            path = f"{prefix}.{key}" if prefix else str(key)
            yield path
            if path in open_paths:
                continue
            child = node._get_node(key) if isinstance(node, DictConfig) else node[key]
            if isinstance(child, DictConfig | Mapping):
                yield from _paths(child, open_paths, path)


def _suggest(path: str, known: Iterable[str]) -> str:
    known = sorted(known)
    close = difflib.get_close_matches(path, known, n=1, cutoff=0.6)
    if not close:
        leaf = path.rsplit(".", 1)[-1]
        by_leaf = {k.rsplit(".", 1)[-1]: k for k in known}
        leaf_match = difflib.get_close_matches(leaf, list(by_leaf), n=1, cutoff=0.75)
        close = [by_leaf[leaf_match[0]]] if leaf_match else []
    return f" Did you mean '{close[0]}'?" if close else ""


_UPSTREAM_ONLY: tuple[tuple[str, str], ...] = (
    ("rllm.gateway", "model gateway"),
    ("rllm.remote_runtime", "remote runtimes"),
    ("rllm.async_training", "asynchronous training"),
    ("rllm.agent", "agent registry"),
    ("rllm.env", "environment registry"),
    ("rllm.rollout.train", "sampling parameters (backends sample as their own sections say)"),
    ("rllm.rollout.val", "sampling parameters (backends sample as their own sections say)"),
    ("rllm.data.max_prompt_length", "tokenised datasets"),
    ("rllm.data.max_response_length", "tokenised datasets"),
    ("rllm.data.seed", "dataset shuffling seed (the embedded backend: rllm.embedded.seed)"),
    ("rllm.workflow.use_workflow", "workflow registry (pass the workflow class to UnifiedTrainer)"),
    ("rllm.workflow.name", "workflow registry (pass the workflow class to UnifiedTrainer)"),
    ("rllm.workflow.workflow_args", "workflow registry (pass workflow_args to UnifiedTrainer)"),
    ("rllm.workflow.warm_queue_size", "asynchronous workflow queue"),
)
"""Keys of rLLM subsystems this project does not have: refused with a message that says so."""


def _check_path(path: str, schema: Schema, source: str) -> None:
    known = set(schema.by_path()) | schema.sections()
    if path not in known and not _under(path, schema.open_paths()):
        for prefix, subsystem in _UPSTREAM_ONLY:
            if path == prefix or path.startswith(prefix + "."):
                raise ConfigError(
                    f"'{path}' in {source} belongs to rLLM's {subsystem}, which rllm does not have; remove it "
                    "(docs/compat.md lists what rllm keeps of rLLM's configuration)."
                )
        raise ConfigError(
            f"Unknown config key '{path}' in {source}.{_suggest(path, known)} See `rllm config --keys` for every key."
        )


def check_keys(layer: DictConfig, schema: Schema, source: str) -> None:
    """Raise :class:`ConfigError` for the first key of ``layer`` that the schema lacks."""
    for path in _paths(layer, schema.open_paths()):
        _check_path(path, schema, source)


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
    try:
        loaded = OmegaConf.create(text, **_alias_bound(text)) if text.strip() else OmegaConf.create({})
    except AssertionError:  # OmegaConf's own check: the document is a scalar, not a container
        raise ConfigError(
            f"Config file {str(path)!r} holds a single value, not a mapping of keys; write `key: value` lines "
            "(`rllm config` prints a complete example)."
        ) from None
    except yaml.YAMLError as exc:
        if "expan" in str(exc):
            raise ConfigError(
                f"Config file {str(path)!r} uses YAML aliases that expand to more than {_ALIAS_NODES:,} nodes "
                "beyond the file's own; write those values out instead of repeating anchors."
            ) from None
        raise ConfigError(f"Config file {str(path)!r} is not valid YAML: {_one_line(exc)}") from None
    except (OmegaConfBaseException, ValueError) as exc:
        raise ConfigError(f"Config file {str(path)!r} could not be read: {_one_line(exc)}") from None
    if isinstance(loaded, ListConfig):
        raise ConfigError(f"Config file {str(path)!r} holds a list; it must hold a mapping of keys.")
    return loaded, f"config file {str(path)!r}"


_ALIAS_NODES = 10_000
"""Nodes that YAML aliases (``*anchor``) may add to a file: a bound on alias expansion, not on size."""
_BOUNDED = "max_yaml_expanded_nodes" in inspect.signature(OmegaConf.create).parameters


def _alias_bound(text: str) -> dict[str, int]:
    """OmegaConf's expansion limit, raised by the file's length.

    Without aliases a document has no more nodes than characters, so only what aliases add
    can reach the limit: a large plain config (a saved ``config.yaml``) always reads back.
    """
    return {"max_yaml_expanded_nodes": _ALIAS_NODES + len(text)} if _BOUNDED else {}


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def parse_value(text: str) -> Any:
    """A command-line value as YAML reads it (``3``, ``true``, ``null``, ``[a,b]``, ``'3'``)."""
    if text == "":
        return ""  # Hydra's `key=`: the empty string
    try:
        parsed = OmegaConf.from_dotlist([f"value={text}"])
    except (yaml.YAMLError, OmegaConfBaseException) as exc:
        raise ConfigError(f"Value {text!r} is not valid YAML: {_one_line(exc)}") from None
    container = OmegaConf.to_container(parsed, resolve=False)
    return cast(dict[str, Any], container)["value"]


def is_override(arg: str) -> bool:
    """Whether a command-line word is an override (``key=value``, ``+key=v``, ``++key=v``, ``~key``)."""
    return arg.startswith("~") or ("=" in arg and not arg.startswith("="))


def _select(config: DictConfig, path: str) -> tuple[bool, Any]:
    node: Any = config
    for part in path.split("."):
        if not isinstance(node, DictConfig) or part not in node:
            return False, None
        node = node._get_node(part)
    return True, node


def _apply(config: DictConfig, override: str, schema: Schema) -> None:
    where = f"override {override!r}"
    if override.startswith("~"):
        key, sep, text = override[1:].partition("=")
        _check_path(key, schema, where)
        present, _ = _select(config, key)
        if sep and present:
            current = OmegaConf.select(config, key)
            if isinstance(current, DictConfig | ListConfig):
                current = OmegaConf.to_container(current, resolve=True)
            expected = parse_value(text)
            if current != expected:
                raise ConfigError(f"Could not delete '{key}': its value is {current!r}, not {expected!r}.")
        default = _default_at(schema, key)
        if default is not _ABSENT:
            OmegaConf.update(config, key, default, merge=False)
        elif not present:
            raise ConfigError(f"Could not delete '{key}': it is not set.")
        else:
            parent, _, leaf = key.rpartition(".")
            del (OmegaConf.select(config, parent) if parent else config)[leaf]
        return
    plus = len(override) - len(override.lstrip("+"))
    if plus > 2:
        raise ConfigError(f"Override {override!r}: use key=value, +key=value or ++key=value.")
    key, sep, text = override[plus:].partition("=")
    if not sep or not key:
        raise ConfigError(f"Override {override!r} is not of the form key=value.")
    _check_path(key, schema, where)
    present, _ = _select(config, key)
    if plus == 1 and present:
        raise ConfigError(
            f"Could not add '{key}': it is already set; use {key}=... to change it or ++{key}=... to add or change."
        )
    value = parse_value(text)
    merge = key in schema.sections() and isinstance(value, Mapping)
    try:
        OmegaConf.update(config, key, value, merge=merge, force_add=True)
    except OmegaConfBaseException as exc:
        raise ConfigError(f"Could not apply {where}: {_one_line(exc)}") from None


_ABSENT = object()


def _default_at(schema: Schema, path: str) -> Any:
    """The schema default at ``path`` (a leaf or a whole section), or ``_ABSENT``."""
    node: Any = schema.defaults()
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return _ABSENT
        node = node[part]
    return node


# -- values ----------------------------------------------------------------------------------
def validate_config(config: DictConfig, schema: Schema | None = None) -> DictConfig:
    """Check every value against the schema, raising a one-line :class:`ConfigError` naming the key.

    Numbers given for string keys become strings; nothing else is converted.
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
    return config


MAX_EXPANSION = 1 << 20
"""Characters an interpolated value may resolve to; ``${.a}${.a}`` chains double per level."""
MAX_DEPTH = 64
"""Interpolations that refer to interpolations, at most this deep."""
_INTERPOLATION = re.compile(r"\$\{([^${}]*)\}")


def check_expansion(config: DictConfig) -> None:
    """Refuse, naming the key, interpolations that would resolve to more than :data:`MAX_EXPANSION` characters.

    OmegaConf expands ``${...}`` without a bound, so a few lines doubling a string per level
    would exhaust memory. Each value's resolved size is bounded from above first, every
    referenced key counted once per mention (memoized, so the check itself stays linear).
    """
    raw = OmegaConf.to_container(config, resolve=False)
    sizes: dict[tuple[str, ...], int] = {}

    def lookup(path: tuple[str, ...]) -> Any:
        node: Any = raw
        for part in path:
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                return _ABSENT
        return node

    def targets(word: str, where: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
        dots = len(word) - len(word.lstrip("."))
        parts = tuple(part for part in word.lstrip(".").split(".") if part)
        if dots:
            yield (*where[: max(len(where) - dots + 1, 0)], *parts)
        elif parts:
            yield parts

    def size(path: tuple[str, ...], depth: int) -> int:
        if path in sizes:
            return sizes[path]
        key = ".".join(path)
        if depth > MAX_DEPTH:
            raise ConfigError(f"{key}: interpolations nest more than {MAX_DEPTH} levels deep; flatten them.")
        sizes[path] = 0  # a cycle counts nothing here; OmegaConf reports it by name when resolving
        value = lookup(path)
        if isinstance(value, dict):
            total = sum(size((*path, str(k)), depth) for k in value) + 2
        elif isinstance(value, list):
            total = sum(size((*path, str(i)), depth) for i in range(len(value))) + 2
        else:
            total = len(str(value))
            if isinstance(value, str):
                for inner in _INTERPOLATION.findall(value):
                    for word in re.split(r"[\s:,()\[\]]+", inner):
                        for target in targets(word, path[:-1]):
                            if target != path and lookup(target) is not _ABSENT:
                                total += size(target, depth + 1)
        if total > MAX_EXPANSION:
            raise ConfigError(
                f"{key}: its interpolations would resolve to more than {MAX_EXPANSION} characters (each "
                "${...} copies the value it names); write the value out or reference it fewer times."
            )
        sizes[path] = total
        return total

    size((), 0)


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
        ConfigKey(f"{base}.estimator_map.{role}", "str", None, "", names=_registered_estimators).check(chosen)
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
    """Merge ``sources`` (configs or YAML paths) and ``overrides`` onto the defaults, then check every value."""
    schema = current_schema()
    config = OmegaConf.create(schema.defaults())
    for layer, source in [_as_layer(source) for source in sources]:
        check_keys(layer, schema, source)
        _check_sections(layer, schema, source)
        try:
            config = OmegaConf.merge(config, layer)  # type: ignore[assignment]
        except OmegaConfBaseException as exc:
            raise ConfigError(f"Could not apply {source}: {_one_line(exc)}") from None
    for override in overrides:
        _apply(config, override, schema)
    return validate_config(config, schema)


def save_config(config: DictConfig, run_dir: Path) -> Path:
    """Write ``config`` as ``run_dir/config.yaml``; ``rllm train -c`` on it runs the same experiment."""
    from rllm.io import write_atomic

    path = run_dir / CONFIG_FILE
    header = (
        "# The configuration of this run, as merged from defaults, files and overrides.\n"
        f"# Reproduce it with: rllm train -c {path}\n"
    )
    write_atomic(path, header + OmegaConf.to_yaml(config))
    return path
