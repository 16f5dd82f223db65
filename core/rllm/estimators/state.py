"""State an estimator keeps across training steps, and how a trainer saves and restores it.

A stateful estimator is a batch-style estimator marked with :func:`stateful`: it takes a
keyword ``state`` (an object made by the factory it was marked with) and may update it on
every call. The object implements :class:`EstimatorState`: ``state_dict()`` returns plain
JSON data (dicts with string keys, lists, strings, numbers, booleans, None) and
``load_state_dict(data)`` restores exactly that, so a checkpoint holds data, never code.

Who owns the state: the caller. A trainer keeps one :class:`EstimatorStates` per run (one
state per estimator name and role), hands it to the collection step and writes its
``state_dict()`` into every checkpoint; a resumed run loads it before its first step. A call
without an ``EstimatorStates`` (``rllm.compute_advantages``, ``rllm advantages``) gets a fresh
state, so it behaves as the first step of a run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar, runtime_checkable

from rllm.errors import CheckpointError, EstimatorOptionError

STATE_FACTORY = "__rllm_state_factory__"
"""Attribute :func:`stateful` sets on the estimator: the zero-argument factory of its state."""

F = TypeVar("F", bound=Callable[..., Any])


@runtime_checkable
class EstimatorState(Protocol):
    """What a stateful estimator's state object implements."""

    def state_dict(self) -> dict[str, Any]:
        """The state as JSON data."""
        ...

    def load_state_dict(self, data: dict[str, Any]) -> None:
        """Replace the state by ``data``, as returned by :meth:`state_dict`."""
        ...


def stateful(factory: Callable[[], EstimatorState]) -> Callable[[F], F]:
    """Mark an estimator as keeping state across calls; ``factory()`` makes a fresh state."""

    def mark(fn: F) -> F:
        setattr(fn, STATE_FACTORY, factory)
        return fn

    return mark


def state_factory(target: Any) -> Callable[[], EstimatorState] | None:
    """The estimator's state factory, or None for a stateless estimator."""
    return getattr(target, STATE_FACTORY, None)


class EstimatorStates:
    """One run's estimator states, keyed by estimator name and role; saved as one JSON object."""

    def __init__(self) -> None:
        self._states: dict[str, dict[str, EstimatorState]] = {}
        self._pending: dict[str, dict[str, dict[str, Any]]] = {}
        self.source = "the restored estimator states"

    def get(self, name: str, target: Any, role: str) -> EstimatorState | None:
        """The state of estimator ``name`` for ``role`` (made on first use); None if it is stateless."""
        factory = state_factory(target)
        if factory is None:
            return None
        per_role = self._states.setdefault(name, {})
        if role not in per_role:
            state = factory()
            if not isinstance(state, EstimatorState):
                raise EstimatorOptionError(
                    f"Estimator {name!r} is marked stateful, but its factory returned {type(state).__name__}, "
                    "which lacks state_dict() and load_state_dict()."
                )
            saved = self._pending.get(name, {}).pop(role, None)
            if saved is not None:
                self._restore(state, saved, name, role)
            per_role[role] = state
        return per_role[role]

    def _restore(self, state: EstimatorState, saved: Any, name: str, role: str) -> None:
        """Load a saved state; one the estimator cannot read names the estimator, role and checkpoint file."""
        try:
            state.load_state_dict(saved)
        except Exception as exc:
            raise CheckpointError(
                f"Estimator {name!r} cannot read its saved state for role {role!r} in {self.source} "
                f"({type(exc).__name__}: {exc}); the estimator changed since it was saved. Start over with "
                "rllm.trainer.resume_mode=disable, or restore the estimator version that wrote it."
            ) from exc

    def state_dict(self) -> dict[str, dict[str, dict[str, Any]]]:
        """``{estimator: {role: state_dict}}``, including restored states not used since."""
        out = {name: dict(roles) for name, roles in self._pending.items() if roles}
        for name, roles in self._states.items():
            out.setdefault(name, {}).update({role: state.state_dict() for role, state in roles.items()})
        return out

    def load_state_dict(self, data: Any, source: str = "the restored estimator states") -> None:
        """Restore what :meth:`state_dict` returned; each state is loaded when its estimator next runs.

        ``source`` (the checkpoint file) is named if an estimator cannot read its state.
        """
        self.source = source
        if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
            raise CheckpointError(
                f"Estimator states must be {{estimator: {{role: state}}}}, got {type(data).__name__}."
            )
        self._states = {}
        self._pending = {str(name): {str(r): s for r, s in roles.items()} for name, roles in data.items()}
