"""The one input every estimator receives: flat per-trajectory arrays plus group structure.

Rewards and optional fields are 1-D arrays in the caller's order (per-step fields are
:class:`Ragged`, one row per trajectory); the group structure is a :class:`GroupLayout`
(:mod:`rllm.estimators.layout`), computed once so that every estimator can do segment
reductions without a Python loop over groups. The rows type lives in
:mod:`rllm.estimators.ragged` and the rule for what counts as a number in
:mod:`rllm.estimators.values`; their names are importable from here as before.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from rllm.contract.fields import BUILTIN_FIELDS, OPTIONAL_FIELDS, TOKEN_FIELDS, BatchField
from rllm.errors import GroupError, InputFieldError, MissingInputError
from rllm.estimators.acceleration import Kernels
from rllm.estimators.labels import _label_array
from rllm.estimators.layout import GroupLayout
from rllm.estimators.ragged import FloatArray, IndexArray, Ragged
from rllm.estimators.resolution import declared_fields
from rllm.estimators.values import _NOT_CONVERTED, EXACT_INTEGERS, _given, _non_number, float_rewards

__all__ = [
    "EXACT_INTEGERS",
    "OPTIONAL_FIELDS",
    "AdvantageBatch",
    "FieldSource",
    "FloatArray",
    "GroupLayout",
    "IndexArray",
    "Ragged",
    "declared_fields",
    "float_rewards",
]

FieldSource = Callable[[], Any]
"""Produces a batch field on first use (the collection step reads trajectories only when asked)."""


class AdvantageBatch:
    """Rewards of many trajectories with their groups and any extra per-trajectory inputs.

    Estimators read fields through :meth:`require`, which names the missing field and the
    estimator when a caller did not supply it. A field may also come from ``sources``, a
    mapping from field name to a function that builds it on first access, so that inputs
    nobody asks for cost nothing.

    A door hands the batch what it resolved from the plugins (:mod:`rllm.estimators.resolution`):
    ``kernels`` for the layout it builds from ``group_ids`` (a given layout keeps its own) and
    ``fields``, the plugin-declared batch fields. A batch built without them looks them up
    when it first needs them.
    """

    def __init__(
        self,
        rewards: ArrayLike,
        group_ids: ArrayLike | GroupLayout,
        *,
        dtype: Any = np.float64,
        response_lengths: ArrayLike | None = None,
        baseline_rewards: ArrayLike | None = None,
        reward_components: ArrayLike | None = None,
        component_weights: ArrayLike | None = None,
        step_rewards: Ragged | Sequence[ArrayLike] | None = None,
        step_values: Ragged | Sequence[ArrayLike] | None = None,
        roles: ArrayLike | None = None,
        task_ids: ArrayLike | None = None,
        sources: Mapping[str, FieldSource] | None = None,
        describe: Callable[[int], str] | None = None,
        extra: Mapping[str, Any] | None = None,
        kernels: Kernels | None = None,
        fields: Mapping[str, BatchField] | None = None,
    ) -> None:
        self._declared_fields = fields
        self.rewards: FloatArray = float_rewards(rewards, dtype)
        if self.rewards.ndim != 1:
            raise GroupError(f"Rewards must be a 1-D array, got shape {self.rewards.shape}.")
        self.layout = group_ids if isinstance(group_ids, GroupLayout) else GroupLayout(group_ids, kernels)
        n = len(self.rewards)
        if self.layout.size != n:
            raise GroupError(f"Got {n} rewards but {self.layout.size} group ids; give exactly one group id per reward.")
        self.dtype = np.dtype(dtype)
        self.nonfinite_rewards = "error"
        """The caller's policy for NaN/inf values (estimators with extra reward inputs follow it too)."""
        self.large_values = False
        """True when squaring the rewards overflows; compiled kernels then leave the work to numpy's scaled path."""
        self.describe = describe
        """Names the trajectory at a position in error messages (the collection step knows its uid)."""
        given = {
            "response_lengths": response_lengths,
            "baseline_rewards": baseline_rewards,
            "reward_components": reward_components,
            "component_weights": component_weights,
            "step_rewards": step_rewards,
            "step_values": step_values,
            "roles": roles,
            "task_ids": task_ids,
        }
        given.update({name: None for name in TOKEN_FIELDS})  # given through ``extra`` or ``sources``
        declared = self._declared() if extra or set(sources or ()) - set(given) else {}
        unknown = sorted((set(sources or ()) | set(extra or ())) - set(given) - set(declared))
        if unknown:
            known = ", ".join([*OPTIONAL_FIELDS, *declared])
            raise GroupError(f"Unknown batch field(s) {', '.join(unknown)}; known: {known}.")
        self._per_step = {
            name: declared[name].per_step for name in (*(extra or ()), *(sources or ())) if name in declared
        }
        given.update(extra or {})
        self._sources = {k: v for k, v in (sources or {}).items() if given.get(k) is None}
        for name, value in given.items():
            if name not in self._sources:
                setattr(self, name, self._checked(name, value))

    def _checked(self, name: str, value: Any) -> Any:
        """Field ``name`` as the batch holds it, validated like rewards: real numbers, finite where scored."""
        if value is None:
            return None
        n = len(self.rewards)
        if name in ("roles", "task_ids"):  # labels: 1 and "1" stay apart, as group ids do
            return _per_item(_label_array(value) if not isinstance(value, np.ndarray) else value, n, name, None)
        if name == "component_weights":
            weights = self._numbers(name, _given(name, value), lambda i: f"at index {i}").reshape(-1)
            bad = ~np.isfinite(weights)
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise InputFieldError(
                    f"component_weights[{i}] is {weights[i]}; give one finite weight per reward component."
                )
            return weights
        if name == "reward_components":  # NaN follows the reward policy (gdpo): only the types are checked here
            given = _given(name, value)
            width = max(1, given.shape[1]) if given.ndim == 2 else 1
            return _components(self._numbers(name, given, lambda i: self._where(i // width)), n, self.dtype)
        builtin = BUILTIN_FIELDS.get(name)
        per_token = builtin is not None and builtin.per_token
        if per_token or (builtin is not None and builtin.per_step) or self._per_step.get(name, False):
            rows = value if isinstance(value, Ragged) else Ragged.from_rows([_given(name, r) for r in value], None)
            rows = Ragged(rows.values, rows.offsets, per_token=per_token)
            if len(rows) != n:
                raise GroupError(f"{name} must have one row per reward ({n}), got {len(rows)} rows.")

            def row(i: int) -> int:
                return int(np.searchsorted(rows.offsets, i, side="right")) - 1

            def step(i: int) -> str:
                return f"{self._where(row(i))}, {'token' if per_token else 'step'} {i - int(rows.offsets[row(i)])}"

            ragged = rows.with_values(self._numbers(name, rows.values, step))
            bad = ~np.isfinite(ragged.values) & ragged.expand(np.isfinite(self.rewards))
            self._refuse(name, ragged.values, bad, f"finite numbers, one per {'token' if per_token else 'step'}", row)
            return ragged
        array = _per_item(self._numbers(name, _given(name, value), self._where), n, name, None)
        if name == "response_lengths":
            bad = ~(np.isfinite(array) & (array >= 0))
            self._refuse(name, array, bad, "a number of tokens (finite, >= 0)")
        else:
            self._refuse(name, array, ~np.isfinite(array) & np.isfinite(self.rewards), "a finite number")
        return array

    def _numbers(self, name: str, given: NDArray[Any], where: Callable[[int], str]) -> NDArray[Any]:
        """``given`` in the batch's float type; a value that is no real number is refused, naming where it is."""
        found = _non_number(given)
        if found is not None:
            raise InputFieldError(
                f"The batch field {name!r} {where(found[0])} is {found[1]}; its values are real numbers: "
                f"{_NOT_CONVERTED}."
            )
        return np.asarray(given, dtype=self.dtype)

    def _where(self, position: int) -> str:
        """A trajectory's place in error messages: the collection step's description, or group and position."""
        if self.describe is not None:
            return self.describe(position)
        group = self.layout.label(int(self.layout.group_index[position]))
        return f"at position {position} in group {group!r}"

    def _refuse(
        self,
        name: str,
        values: NDArray[Any],
        bad: NDArray[np.bool_],
        wanted: str,
        trajectory: Callable[[int], int] = int,
    ) -> None:
        """The error naming field ``name``'s first value where ``bad`` holds (its trajectory's group and position)."""
        if not bad.any():
            return
        first = int(np.flatnonzero(bad)[0])
        raise InputFieldError(
            f"{int(np.count_nonzero(bad))} value(s) of the batch field {name!r} are unusable; the first is "
            f"{self._where(trajectory(first))} (value {values[first].item()!r}). Give each trajectory {wanted}."
        )

    def _declared(self) -> Mapping[str, BatchField]:
        """The plugin-declared batch fields: the door's, else looked up now."""
        return self._declared_fields if self._declared_fields is not None else declared_fields()

    def _field_names(self) -> list[str]:
        return [*OPTIONAL_FIELDS, *self._per_step]

    def __getattr__(self, name: str) -> Any:
        # Only reached for fields left to a source: build them once, on first use.
        sources = self.__dict__.get("_sources", {})
        if name not in sources:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        value = self._checked(name, sources.pop(name)())
        if self.__dict__.get("_frozen"):
            value = _read_only(value)
        setattr(self, name, value)
        return value

    def freeze(self) -> None:
        """Make the rewards and every field read-only views: an estimator cannot change the caller's arrays."""
        self._frozen = True
        for name in ("rewards", *self._field_names()):
            if name in self.__dict__:
                setattr(self, name, _read_only(self.__dict__[name]))

    def __len__(self) -> int:
        return len(self.rewards)

    @property
    def n_groups(self) -> int:
        return self.layout.n_groups

    def subset(self, keep: NDArray[np.bool_]) -> AdvantageBatch:
        """The trajectories where ``keep`` is True, with their groups and fields (read on first use).

        Groups keep their labels; a group with no kept trajectory is absent.
        """
        labels = np.asarray(self.layout.labels, dtype=object)[self.layout.group_index[keep]]
        given = {"component_weights": self.__dict__.get("component_weights")}
        sources = {
            name: partial(_take, self, name, keep)
            for name in self._field_names()
            if name != "component_weights" and (name in self.__dict__ or name in self._sources)
        }
        sub = AdvantageBatch(
            self.rewards[keep],
            _label_array(labels.tolist()),
            dtype=self.dtype,
            sources=sources,
            kernels=self.layout.kernels,
            fields=self._declared_fields,
            **given,
        )
        sub.large_values = self.large_values
        return sub

    def require(self, name: str, estimator: str) -> Any:
        value = getattr(self, name, None)
        if value is None and name not in OPTIONAL_FIELDS and name not in self._declared():
            known = [*OPTIONAL_FIELDS, *self._declared()]
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise MissingInputError(
                f"Estimator {estimator!r} requires the batch field {name!r}, which is neither built in nor "
                f"declared by an installed plugin.{hint} Fields: {', '.join(known)}."
            )
        if value is None:
            raise MissingInputError(
                f"Estimator {estimator!r} needs the input {name!r}, which this batch does not have. "
                f"Pass {name}=... to rllm.compute_advantages, or fill it from the trajectories "
                "(see docs/estimators.md)."
            )
        return value


def _take(batch: AdvantageBatch, name: str, keep: NDArray[np.bool_]) -> Any:
    """Field ``name`` of ``batch`` for the kept trajectories only."""
    value = getattr(batch, name)
    if value is None:
        return None
    if isinstance(value, Ragged):
        lengths = value.lengths[keep]
        offsets = np.zeros(len(lengths) + 1, dtype=np.intp)
        np.cumsum(lengths, out=offsets[1:])
        return Ragged(values=value.values[np.repeat(keep, value.lengths)], offsets=offsets)
    return np.asarray(value)[keep]


def _read_only(value: Any) -> Any:
    if isinstance(value, Ragged):
        return Ragged(values=_read_only(value.values), offsets=_read_only(value.offsets))
    if isinstance(value, np.ndarray) and value.flags.writeable:
        view = value.view()
        view.flags.writeable = False
        return view
    return value


def _per_item(values: ArrayLike, n: int, name: str, dtype: Any) -> NDArray[Any]:
    array = np.asarray(values, dtype=dtype)
    if array.shape != (n,):
        raise GroupError(f"{name} must have one entry per reward ({n}), got shape {array.shape}.")
    return array


def _components(values: ArrayLike, n: int, dtype: Any) -> FloatArray:
    array = np.asarray(values, dtype=dtype)
    if array.ndim != 2 or array.shape[0] != n:
        raise GroupError(f"reward_components must have shape (n_rewards={n}, n_components), got {array.shape}.")
    return array
