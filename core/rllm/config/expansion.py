"""Bounds on what a small config file can expand to: YAML aliases and ``${...}`` interpolations.

Both let a few lines stand for an enormous value (a "YAML bomb"); reading or resolving one
would exhaust memory. Aliases are bounded while a file is parsed, interpolations before the
configuration is resolved, each refused with a one-line :class:`ConfigError`.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterator
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf

from rllm.errors import ConfigError

_ALIAS_NODES = 10_000
"""Nodes that YAML aliases (``*anchor``) may add to a file: a bound on alias expansion, not on size."""
_BOUNDED = "max_yaml_expanded_nodes" in inspect.signature(OmegaConf.create).parameters


def _alias_bound(text: str) -> dict[str, int]:
    """OmegaConf's expansion limit, raised by the file's length.

    Without aliases a document has no more nodes than characters, so only what aliases add
    can reach the limit: a large plain config (a saved ``config.yaml``) always reads back.
    """
    return {"max_yaml_expanded_nodes": _ALIAS_NODES + len(text)} if _BOUNDED else {}


def aliases_overflow(text: str) -> bool:
    """Whether the file's aliases expand it beyond :func:`_alias_bound`'s limit, counted on its node graph.

    OmegaConf 2.4 bounds the expansion itself; 2.3 (which verl's hydra-core pins, so
    ``rllm[verl]`` installs it) does not. Composing the document builds each anchored node
    once, aliases pointing at it, so counting the expanded size (memoized per node) costs
    what parsing does. A document that does not compose is left for OmegaConf to report.
    """
    if "*" not in text:
        return False
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except (yaml.YAMLError, RecursionError):
        return False
    limit, sizes, open_nodes = _ALIAS_NODES + len(text), dict[int, int](), set[int]()
    pending: list[tuple[Any, bool]] = [(root, False)] if root is not None else []
    while pending:  # post-order without recursion: a node's size once its children's are known
        node, ready = pending.pop()
        if id(node) in sizes:
            continue
        if not ready and id(node) in open_nodes:
            return True  # an alias inside its own anchor: an endless value
        open_nodes.add(id(node))
        children = (
            [part for pair in node.value for part in pair]
            if isinstance(node, yaml.MappingNode)
            else (node.value if isinstance(node, yaml.SequenceNode) else [])
        )
        if not ready:
            pending.append((node, True))
            pending.extend((child, False) for child in children if id(child) not in sizes)
            continue
        sizes[id(node)] = 1 + sum(sizes[id(child)] for child in children)
        if sizes[id(node)] > limit:
            return True
    return False


MAX_EXPANSION = 1 << 20
"""Characters an interpolated value may resolve to; ``${.a}${.a}`` chains double per level."""
MAX_DEPTH = 64
"""Interpolations that refer to interpolations, at most this deep."""
_INTERPOLATION = re.compile(r"\$\{([^${}]*)\}")
_ABSENT = object()
"""What a path that names nothing looks up to."""


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
