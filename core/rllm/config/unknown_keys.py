"""Unknown keys: every key a user writes must exist in the schema, or the error names the close match.

A typo fails loudly instead of being silently ignored; a key of an rLLM subsystem this
project does not have gets a message that says so rather than a guess.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from omegaconf import DictConfig

from rllm.config.schema import Schema
from rllm.errors import ConfigError


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
    ("rllm.remote_runtime", "remote runtimes"),
    ("rllm.async_training.mini_batch_size", "fully-async mini-batches"),
    ("rllm.async_training.fwd_bwd_group_size", "fully-async forward-backward groups"),
    (
        "rllm.async_training.trigger_parameter_sync_step",
        "parameter-sync interval (rllm publishes the weights after every update)",
    ),
    ("rllm.async_training.partial_rollout", "partial rollouts"),
    ("rllm.async_training.episode_offload_dir", "episode offloading"),
    ("rllm.async_training.trajectory_group_offload_dir", "episode offloading"),
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
