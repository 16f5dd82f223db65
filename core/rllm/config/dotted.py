"""Dotted keys in a mapping (``rllm.trainer.total_epochs: 3``) mean the nested keys, as on the command line.

YAML and OmegaConf keep ``a.b: 1`` as one key named ``a.b``, which no reader looks up: the
value would be dropped without a word. Every door (config files, mappings given to
``load_config``, ``AgentTrainer`` and ``UnifiedTrainer``, a mapping override, verl's
``algorithm`` section) passes its mapping through :func:`nest_dotted` before the keys are
checked, so a dotted key is applied, and checked, exactly as the override ``a.b=1`` would be.
Below an open mapping (estimator names, roles, options) keys written nested are names and
stay as written: ``estimator_options: {verl.grpo: {...}}`` names the estimator ``verl.grpo``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from rllm.errors import ConfigError


def nest_dotted(
    tree: Mapping[Any, Any], open_paths: frozenset[str] = frozenset(), source: str = "the config", prefix: str = ""
) -> dict[Any, Any] | None:
    """``tree`` with its dotted keys split into nested ones, or None when it has none (nothing to change).

    ``tree`` sits at the dotted path ``prefix``; ``open_paths`` are the paths whose keys are
    user-chosen names. A key set twice (once dotted, once nested) or set both to a value and
    to keys below it is a :class:`ConfigError` naming both spellings and ``source``.
    """
    root = tuple(prefix.split(".")) if prefix else ()
    leaves = list(_leaves(tree, root, open_paths, "", _named(root, open_paths)))
    if not any(dotted for *_, dotted in leaves):
        return None
    out: dict[Any, Any] = {}
    written_as: dict[tuple[Any, ...], str] = {}
    for path, value, written, _ in leaves:
        node, relative = out, path[len(root) :]
        for depth in range(1, len(relative)):
            child = node.setdefault(relative[depth - 1], {})
            if not isinstance(child, dict):
                _clash(source, written_as[root + relative[:depth]], written)
            node = child
        last, empty = relative[-1], isinstance(value, dict) and not value
        if last in node and not (empty and isinstance(node[last], dict)):
            _clash(source, written_as.get(path, written), written)
        node[last] = node.get(last, {}) if empty else value
        written_as.setdefault(path, written)
    return out


def _clash(source: str, first: str, second: str) -> None:
    raise ConfigError(
        f"{source} sets one key twice, as {first!r} and as {second!r} (a dotted key means the nested keys); keep one."
    )


def _leaves(
    node: Mapping[Any, Any], parent: tuple[Any, ...], open_paths: frozenset[str], written: str, named: bool
) -> Iterator[tuple[tuple[Any, ...], Any, str, bool]]:
    """Each value's path as segments, the value, the key as written, and whether a dotted key was split.

    ``named``: ``node`` is (inside) an open mapping, whose keys are names kept as written.
    """
    for key, value in node.items():
        dotted = isinstance(key, str) and "." in key and not named
        path = parent + (tuple(key.split(".")) if dotted else (key,))
        spelled = f"{written}: {key}" if written else str(key)
        if isinstance(value, Mapping) and value:
            for leaf in _leaves(value, path, open_paths, spelled, named or _named(path, open_paths)):
                yield *leaf[:3], leaf[3] or dotted
        else:
            yield path, dict(value) if isinstance(value, Mapping) else value, spelled, dotted


def _named(path: tuple[Any, ...], open_paths: frozenset[str]) -> bool:
    return any(".".join(map(str, path[:depth])) in open_paths for depth in range(1, len(path) + 1))
