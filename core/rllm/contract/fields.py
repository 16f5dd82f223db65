"""Batch fields: the per-trajectory inputs an estimator can ``require``, built in or added by a plugin."""

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
    per_token: bool = False
    """One value per response token, the trajectory's steps' tokens in order (a row of the batch)."""
    from_backend: bool = False
    """Filled by the training backend, not the workflow: a run whose backend does not is refused before training."""


def _token_field(key: str, doc: str) -> BuiltinField:
    doc = f"list of numbers, one per response token: {doc}"
    return BuiltinField(doc=doc, jsonl_key=key, from_backend=True, per_token=True)


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
    "old_log_probs": _token_field("old_log_probs", "the old (sampling-time trained) policy's log-prob of the token"),
    "rollout_log_probs": _token_field("rollout_log_probs", "the sampler's log-prob of the token (a step's logprobs)"),
    "entropy": _token_field("entropy", "the entropy of the policy's distribution at the token"),
    "sum_pi_squared": _token_field(
        "sum_pi_squared", "the sum over the vocabulary of the squared probabilities at the token"
    ),
    "teacher_log_probs": _token_field(
        "teacher_log_probs", "a teacher model's log-prob of the token (on-policy distillation)"
    ),
    "roles": BuiltinField(doc="the group's role, per trajectory"),
    "task_ids": BuiltinField(doc="the group's task id, per trajectory"),
}
"""The one table of the built-in batch fields beyond rewards; every other list of them is derived from it."""

OPTIONAL_FIELDS = tuple(BUILTIN_FIELDS)
"""Batch fields beyond rewards that an estimator may list in ``requires``."""

TOKEN_FIELDS = tuple(name for name, field in BUILTIN_FIELDS.items() if field.per_token)
"""The built-in per-token fields (rows of one value per response token)."""

BACKEND_FIELDS = tuple(name for name, field in BUILTIN_FIELDS.items() if field.from_backend)
"""The built-in fields a training backend fills (its ``batch_fields``), which a workflow does not."""


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
