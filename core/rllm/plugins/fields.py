"""Batch fields that plugins add: per-trajectory inputs an estimator can ``require`` like a built-in one."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class BuiltinField:
    """A batch field rllm fills itself, described as a :class:`BatchField` is (the collection step reads it).

    ``jsonl_key`` is the per-line JSON key ``rllm advantages`` reads it from; None: not read from lines.
    """

    per_step: bool = False
    doc: str = ""
    jsonl_key: str | None = None


BUILTIN_FIELDS: dict[str, BuiltinField] = {
    "response_lengths": BuiltinField(doc="integer >= 0: tokens in the response", jsonl_key="response_length"),
    "baseline_rewards": BuiltinField(
        doc="number: reward of the baseline (e.g. greedy) response", jsonl_key="baseline_reward"
    ),
    "reward_components": BuiltinField(
        doc="list of numbers, or an object with the same keys on every line", jsonl_key="reward_components"
    ),
    "component_weights": BuiltinField(doc="one weight per reward component (the estimator's option)"),
    "step_rewards": BuiltinField(per_step=True, doc="list of numbers: reward of each step", jsonl_key="step_rewards"),
    "step_values": BuiltinField(
        per_step=True, doc="list of numbers: value estimate of each step", jsonl_key="step_values"
    ),
    "roles": BuiltinField(doc="the group's role, per trajectory"),
    "task_ids": BuiltinField(doc="the group's task id, per trajectory"),
}
"""The one table of the built-in batch fields beyond rewards; every other list of them is derived from it."""

OPTIONAL_FIELDS = tuple(BUILTIN_FIELDS)
"""Batch fields beyond rewards that an estimator may list in ``requires``."""


@dataclass(frozen=True)
class BatchField:
    """How to fill one batch field.

    ``read(trajectory)`` gives the trajectory's value: a number, or with ``per_step`` a list of
    numbers, one per step. The collection step calls it for every trajectory of a batch whose
    estimator requires the field; ``rllm.compute_advantages`` takes the field as a keyword
    array; ``rllm advantages`` reads it from the per-line JSON key ``jsonl_key`` (default: the
    field's name).
    """

    read: Callable[[Any], Any]
    per_step: bool = False
    doc: str = ""
    jsonl_key: str | None = None

    def line_key(self, name: str) -> str:
        return self.jsonl_key or name


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


BATCH_ATTRIBUTES = (
    "layout",
    "nonfinite_rewards",
    "large_values",
    "describe",
    "dtype",
    "freeze",
    "n_groups",
    "require",
    "subset",
)
"""``AdvantageBatch``'s own names, which a field read as ``batch.<name>`` would shadow.

The batch sits in a layer above this one, so its names are listed here;
tests/estimators/test_field_names.py fails when the batch gains a public name this list lacks.
"""


def _reserved_names() -> dict[str, str]:
    """Names a batch field may not take, with what owns them: batch internals, options, the API's parameters."""
    from rllm.plugins.options import CONFIG_NAMES, CONTEXT_NAMES, NUMERICS_NAMES

    taken = {name: "an estimator option" for name in (*NUMERICS_NAMES, *CONFIG_NAMES, "components", "dtype")}
    taken.update({name: "a context argument of estimators" for name in CONTEXT_NAMES})
    taken.update({name: "a parameter of rllm.compute_advantages" for name in ("estimator", "group_ids")})
    taken.update({name: "an AdvantageBatch attribute" for name in BATCH_ATTRIBUTES})
    return taken
