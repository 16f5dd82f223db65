"""The check a plugin's batch field must pass; the field vocabulary itself is :mod:`rllm.contract.fields`."""

from __future__ import annotations

from typing import Any

from rllm.contract.fields import BATCH_ATTRIBUTES, BUILTIN_FIELDS, OPTIONAL_FIELDS, BatchField, BuiltinField
from rllm.contract.options import CONFIG_NAMES, CONTEXT_NAMES, NUMERICS_NAMES

__all__ = ["BATCH_ATTRIBUTES", "BUILTIN_FIELDS", "OPTIONAL_FIELDS", "BatchField", "BuiltinField", "batch_field_problem"]


def batch_field_problem(name: str, target: Any) -> str | None:
    """Why ``target`` cannot be registered as batch field ``name``, or None."""
    if not isinstance(target, BatchField):
        return f"is {target!r}, not an rllm.toolkit.BatchField(read=..., per_step=..., doc=...)"
    if not name.isidentifier():
        return "is not a valid field name: use a Python identifier, e.g. 'difficulty'"
    if name in OPTIONAL_FIELDS or name == "rewards":
        return f"is a field rllm already fills; built-in fields: rewards, {', '.join(OPTIONAL_FIELDS)}"
    taken = _reserved_names()
    if name in taken:
        return f"is the name of {taken[name]}, which a field would shadow; choose another name, e.g. '{name}_value'"
    line_keys = {"reward", "task_id", "group_id", *(f.jsonl_key for f in BUILTIN_FIELDS.values() if f.jsonl_key)}
    if target.line_key(name) in line_keys:
        return (
            f"reads the per-line JSON key {target.line_key(name)!r}, which rllm reads itself; give it another jsonl_key"
        )
    if not callable(target.read):
        return f"has read={target.read!r}, which is not callable"
    return None


def _reserved_names() -> dict[str, str]:
    """Names a batch field may not take, with what owns them: batch internals, options, the API's parameters."""
    taken = {name: "an estimator option" for name in (*NUMERICS_NAMES, *CONFIG_NAMES, "components", "dtype")}
    taken.update({name: "a context argument of estimators" for name in CONTEXT_NAMES})
    taken.update({name: "a parameter of rllm.compute_advantages" for name in ("estimator", "group_ids")})
    taken.update({name: "an AdvantageBatch attribute" for name in BATCH_ATTRIBUTES})
    return taken
