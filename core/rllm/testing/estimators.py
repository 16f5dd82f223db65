"""Conformance checks for an estimator, run through the doors users use.

Each check takes the registered name and raises :class:`rllm.errors.ConformanceError` naming
the property and the input that broke it. The inputs are :mod:`rllm.testing.estimator_cases`'.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rllm.errors import ConformanceError, EstimatorOptionError, RLLMError
from rllm.testing.estimator_cases import Case, cases, shown

PROPERTIES = ("zero_mean", "shift_invariant", "scale_invariant", "group_independent")
"""Group-wise properties an estimator may declare; each is checked on groups of two or more."""

_TOLERANCE = 1e-6


def _fail(name: str, prop: str, case: Case, detail: str) -> ConformanceError:
    return ConformanceError(f"estimator {name!r} breaks '{prop}': {detail}; input: {case.describe()}")


def _compute(name: str, case: Case, options: Mapping[str, Any], prop: str) -> np.ndarray:
    """``rllm.compute_advantages`` on ``case`` as a flat array (a per-step result: its per-trajectory sums)."""
    import rllm

    try:
        result = rllm.compute_advantages(name, case.rewards, case.group_ids, **case.fields, **options)
    except RLLMError as exc:
        raise _fail(name, prop, case, f"rllm.compute_advantages raised {type(exc).__name__}: {exc}") from None
    from rllm.estimators.batch import Ragged

    flat = np.asarray([row.sum() for row in result.rows()] if isinstance(result, Ragged) else result, dtype=float)
    if flat.shape != (len(case.rewards),):
        raise _fail(name, prop, case, f"returned shape {flat.shape} for {len(case.rewards)} rewards")
    return flat


def _members(case: Case) -> dict[Any, list[int]]:
    groups: dict[Any, list[int]] = {}
    for position, label in enumerate(case.group_ids):
        groups.setdefault((type(label), label), []).append(position)
    return groups


def check_order_preserved(name: str, options: Mapping[str, Any], case: Case) -> None:
    """Shuffling the trajectories shuffles the advantages the same way: output is in input order."""
    base = _compute(name, case, options, "order preserved")
    order = list(np.random.default_rng(1).permutation(len(case.rewards)))
    moved = _compute(name, case.permuted(order), options, "order preserved")
    wrong = np.flatnonzero(~np.isclose(moved, base[order], rtol=_TOLERANCE, atol=_TOLERANCE))
    if wrong.size:
        i = int(wrong[0])
        raise _fail(
            name,
            "order preserved",
            case,
            f"after permuting the inputs by {order}, position {i} got {moved[i]:.6g} instead of the advantage "
            f"{base[order[i]]:.6g} of input {order[i]} ({wrong.size} positions differ)",
        )


def check_labels_any_type(name: str, options: Mapping[str, Any], case: Case) -> None:
    """Renaming the groups (other labels, other types) changes nothing."""
    base = _compute(name, case, options, "labels of any type")
    renamed_map = {key: f"g{i}" if i % 2 else i * 10 for i, key in enumerate(_members(case))}
    renamed = Case(case.rewards, [renamed_map[(type(g), g)] for g in case.group_ids], case.fields)
    after = _compute(name, renamed, options, "labels of any type")
    if not np.allclose(after, base, rtol=_TOLERANCE, atol=_TOLERANCE):
        raise _fail(name, "labels of any type", case, f"renaming the groups changed the advantages to {shown(after)}")


GROUP_COUNT_TOLERANCE = 0.1
"""How far (relative) doubling the number of groups may move an advantage: a variance estimated over the whole
batch with its n - 1 correction moves it a few percent; an advantage that scales with the group count doubles."""


def check_group_count(name: str, options: Mapping[str, Any], case: Case) -> None:
    """The batch with every group copied under a new label gives each trajectory about the advantage it had.

    An estimator may whiten over the whole batch (the copy leaves its mean and spread as they were),
    but its advantages must not grow or shrink with how many groups a step holds.
    """
    prop = "advantages do not scale with the number of groups"
    base = _compute(name, case, options, prop)
    copies = [("copy", repr(label)) for label in case.group_ids]
    fields = {key: np.concatenate([np.asarray(value), np.asarray(value)]) for key, value in case.fields.items()}
    doubled = _compute(name, Case(case.rewards * 2, [*case.group_ids, *copies], fields), options, prop)[: len(base)]
    floor = _TOLERANCE * max(1.0, float(np.abs(base).max()))
    wrong = np.flatnonzero(np.abs(doubled - base) > GROUP_COUNT_TOLERANCE * np.maximum(np.abs(base), floor))
    if wrong.size:
        i = int(wrong[0])
        raise _fail(
            name,
            prop,
            case,
            f"with each of the {len(_members(case))} groups copied under a new label, trajectory {i}'s advantage "
            f"went from {base[i]:.6g} to {doubled[i]:.6g}; compute each group's advantages from its own "
            "rewards (or normalise by the batch's spread, not its size)",
        )


def check_finite_output(name: str, options: Mapping[str, Any], case: Case) -> None:
    """Finite rewards give finite advantages."""
    values = _compute(name, case, options, "finite output")
    if not np.isfinite(values).all():
        raise _fail(name, "finite output", case, f"returned {shown(values)}")


def check_options(name: str, options: Mapping[str, Any], case: Case) -> None:
    """Every declared option is accepted at its default; an undeclared one is refused naming it."""
    import rllm

    declaration = rllm.get_estimator(name).declaration
    for option in declaration.options:
        if option.default is not None:
            _compute(name, case, {**options, option.name: option.default}, f"declared option {option.name!r} accepted")
    try:
        rllm.compute_advantages(name, case.rewards, case.group_ids, **case.fields, **options, no_such_option_x=1)
    except EstimatorOptionError as exc:
        if "no_such_option_x" not in str(exc):
            raise _fail(name, "undeclared option refused", case, f"the error does not name the option: {exc}") from None
        return
    raise _fail(name, "undeclared option refused", case, "the option no_such_option_x=1 was accepted")


def check_owns_output(name: str, options: Mapping[str, Any], case: Case) -> None:
    """A batch-style estimator returns a new array, not its rewards or a view of another input.

    rllm's doors copy such a result, so the caller's data stays intact; a caller that runs the
    estimator itself (a bridge, a benchmark) would get its own input back, and write into it.
    """
    import dataclasses
    import functools

    import rllm
    from rllm.toolkit import AdvantageBatch, run_estimator

    entry = rllm.get_estimator(name)
    shared: list[str] = []

    @functools.wraps(entry.target)
    def watched(batch: AdvantageBatch, *args: Any, **kwargs: Any) -> Any:
        result = entry.target(batch, *args, **kwargs)
        inputs = {key: value for key, value in vars(batch).items() if isinstance(value, np.ndarray)}
        if isinstance(result, np.ndarray):
            shared.extend(key for key, value in inputs.items() if np.may_share_memory(result, value))
        return result

    try:
        run_estimator(dataclasses.replace(entry, target=watched), AdvantageBatch(case.rewards, case.group_ids), options)
    except RLLMError as exc:
        raise _fail(name, "owns its output", case, f"raised {type(exc).__name__}: {exc}") from None
    if shared:
        raise _fail(
            name,
            "owns its output",
            case,
            f"it returned a view of its input batch.{shared[0]}; return a new array (e.g. batch.rewards - baseline)",
        )


def _groupwise(name: str, options: Mapping[str, Any], case: Case, prop: str) -> None:
    base = _compute(name, case, options, prop)
    groups = [p for p in _members(case).values() if len(p) > 1]
    if prop == "zero_mean":
        for positions in groups:
            total = float(base[positions].sum())
            if abs(total) > _TOLERANCE * max(1.0, float(np.abs(base).max())):
                label = case.group_ids[positions[0]]
                raise _fail(name, prop, case, f"group {label!r} sums to {total:.6g}, not 0")
        return
    target = groups[0]
    label = case.group_ids[target[0]]
    rewards = np.asarray(case.rewards, dtype=float)
    changed = rewards.copy()
    if prop == "shift_invariant":
        changed[target] += 3.0
        what = f"adding 3 to every reward of group {label!r}"
        check = list(range(len(rewards)))
    elif prop == "scale_invariant":
        changed[target] *= 2.5
        what = f"multiplying every reward of group {label!r} by 2.5"
        check = list(range(len(rewards)))
    else:  # group_independent
        changed[target] = changed[target][::-1] * 2.0 + 1.0
        what = f"changing the rewards of group {label!r}"
        check = [i for i in range(len(rewards)) if i not in target]
    after = _compute(name, Case(changed.tolist(), case.group_ids, case.fields), options, prop)
    wrong = [i for i in check if not np.isclose(after[i], base[i], rtol=1e-4, atol=1e-4)]
    if wrong:
        i = wrong[0]
        raise _fail(name, prop, case, f"{what} changed advantage {i} from {base[i]:.6g} to {after[i]:.6g}")
    if prop == "group_independent":  # nor may the number of groups matter
        kept = [i for i in range(len(rewards)) if i not in target]
        alone = _compute(name, case.permuted(kept), options, prop)
        wrong = [j for j, i in enumerate(kept) if not np.isclose(alone[j], base[i], rtol=1e-4, atol=1e-4)]
        if wrong:
            j = wrong[0]
            raise _fail(
                name,
                prop,
                case,
                f"leaving group {label!r} out changed advantage {kept[j]} from {base[kept[j]]:.6g} to {alone[j]:.6g}",
            )


def _levelled(case: Case) -> Case:
    """``case`` with rewards rescaled into [0, 1] (order kept) and each group's other fields set to its first member's.

    Within a group only the rewards then differ, so only they can order the advantages.
    """
    rewards = np.asarray(case.rewards, dtype=float)
    low, span = float(rewards.min()), float(np.ptp(rewards)) or 1.0
    fields = {}
    for key, value in case.fields.items():
        levelled = np.array(value, copy=True)
        for positions in _members(case).values():
            levelled[positions] = levelled[positions[0]]
        fields[key] = levelled
    return Case(((rewards - low) / span).tolist(), list(case.group_ids), fields)


def check_reward_direction(name: str, options: Mapping[str, Any], case: Case) -> None:
    """Within a group, a higher reward never gets a lower advantage (rewards in [0, 1], other fields alike).

    An estimator whose advantages do not move with the rewards (one reading other fields only,
    such as ``distill``) has no direction to keep.
    """
    prop = "higher reward, higher advantage"
    levelled = _levelled(case)
    base = _compute(name, levelled, options, prop)
    reversed_rewards = Case([1.0 - r for r in levelled.rewards], levelled.group_ids, levelled.fields)
    if np.allclose(_compute(name, reversed_rewards, options, prop), base, rtol=_TOLERANCE, atol=_TOLERANCE):
        return
    tolerance = _TOLERANCE * max(1.0, float(np.abs(base).max()))
    for positions in _members(levelled).values():
        for i in positions:
            for j in positions:
                if levelled.rewards[i] > levelled.rewards[j] and base[i] < base[j] - tolerance:
                    raise _fail(
                        name,
                        prop,
                        levelled,
                        f"in group {levelled.group_ids[i]!r}, trajectory {i} (reward {levelled.rewards[i]:.4g}) got "
                        f"advantage {base[i]:.6g}, below trajectory {j}'s {base[j]:.6g} (reward "
                        f"{levelled.rewards[j]:.4g}): training would favour the worse answer; check the sign",
                    )


@dataclass(frozen=True)
class Check:
    """One named check of one plugin part; call it to run it. ``id`` names it in test reports."""

    id: str
    run: Callable[[], None]

    def __call__(self) -> None:
        self.run()

    def __repr__(self) -> str:
        return self.id


_ALWAYS: dict[str, Callable[[str, Mapping[str, Any], Case], None]] = {
    "order_preserved": check_order_preserved,
    "labels_any_type": check_labels_any_type,
    "finite_output": check_finite_output,
    "reward_direction": check_reward_direction,
    "group_count": check_group_count,
}


def estimator_checks(
    name: str, *, properties: Sequence[str] = (), options: Mapping[str, Any] | None = None
) -> list[Check]:
    """The checks for estimator ``name``: the contract of every estimator, plus its declared ``properties``.

    ``options`` are passed on every call (an estimator that needs one to run). The option check is
    included when the estimator declares its options (``register(..., options=[...])``); one
    registered without a declaration accepts any option, so there is nothing to refuse.
    """
    import rllm

    unknown = [p for p in properties if p not in PROPERTIES]
    if unknown:
        raise ConformanceError(
            f"unknown property {unknown[0]!r} for estimator {name!r}; known: {', '.join(PROPERTIES)}"
        )
    entry = rllm.get_estimator(name)
    given = dict(options or {})
    found: list[Check] = []
    for number, case in enumerate(cases(entry.requires)):
        for label, check in _ALWAYS.items():
            found.append(Check(f"{name}-{label}-{number}", _bind(check, name, given, case)))
        if entry.declaration.declared:
            found.append(Check(f"{name}-options-{number}", _bind(check_options, name, given, case)))
        for prop in properties:
            found.append(Check(f"{name}-{prop}-{number}", _bind(_property(prop), name, given, case)))
    if not entry.requires:
        found.append(Check(f"{name}-collection_door", lambda: check_collection_door(name, given)))
        if entry.style == "batch":
            found.append(Check(f"{name}-owns_output", _bind(check_owns_output, name, given, cases()[0])))
    return found


def _property(prop: str) -> Callable[[str, Mapping[str, Any], Case], None]:
    return lambda name, options, case: _groupwise(name, options, case, prop)


def _bind(check: Callable[[str, Mapping[str, Any], Case], None], name: str, options: Mapping[str, Any], case: Case):  # type: ignore[no-untyped-def]
    return lambda: check(name, options, case)


def check_collection_door(name: str, options: Mapping[str, Any]) -> None:
    """The trainer's collection step gives every step the advantage ``rllm.compute_advantages`` gives."""
    from rllm.config.algorithm import AlgorithmConfig
    from rllm.estimators.collect import collect_advantages
    from rllm.types import Step, Trajectory, TrajectoryGroup

    case = cases()[0]
    expected = _compute(name, case, options, "collection door agrees")
    members = _members(case)
    groups = []
    trajectories: dict[int, Trajectory] = {}
    for number, positions in enumerate(members.values()):
        group = []
        for p in positions:
            trajectories[p] = Trajectory(name="solver", reward=case.rewards[p], steps=[Step(response_ids=[1, 2])])
            group.append(trajectories[p])
        groups.append(TrajectoryGroup.for_task(f"task{number}", "solver", group, [{}] * len(group)))
    config = AlgorithmConfig(estimator=name, estimator_options=dict(options))
    try:
        collect_advantages(groups, config)
    except RLLMError as exc:
        raise _fail(
            name, "collection door agrees", case, f"the collection step raised {type(exc).__name__}: {exc}"
        ) from None
    for p, trajectory in trajectories.items():
        got = trajectory.steps[0].advantage
        got = float(np.sum(got)) if isinstance(got, list) else float(got)  # type: ignore[arg-type]
        if not np.isclose(got, expected[p], rtol=_TOLERANCE, atol=_TOLERANCE):
            raise _fail(
                name,
                "collection door agrees",
                case,
                f"trajectory {p} got {got:.6g} from the collection step, {expected[p]:.6g} from compute_advantages",
            )
