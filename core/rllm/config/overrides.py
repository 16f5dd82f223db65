"""Command-line overrides, in Hydra's grammar, applied to a merged configuration.

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

Parsed here rather than by Hydra (hydra-core is not a dependency, and its parser brings ANTLR's runtime);
OmegaConf's ``from_dotlist`` knows only ``key=value``, so the prefixes are read here and the values by YAML.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from rllm.config.dotted import nest_dotted
from rllm.config.schema import Schema
from rllm.config.unknown_keys import _check_path, _paths
from rllm.errors import ConfigError


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
    if isinstance(value, Mapping):  # a mapping's keys are the schema's too: dotted ones nested, each one checked
        value = nest_dotted(value, schema.open_paths(), where, prefix=key) or value
        for path in _paths(value, schema.open_paths(), prefix=key):
            _check_path(path, schema, where)
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
