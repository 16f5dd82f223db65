"""What one call needs from the plugins, asked of the plugin manager once, at the door.

A door is where a caller enters advantage estimation: ``rllm.compute_advantages``, the
list-of-arrays API, the collection step, ``rllm advantages`` and the verl bridge. Each asks
the manager once for a :class:`Resolved` (the estimator entries, the compiled kernels and
the plugin-declared batch fields) and hands it on: the batch and its layout take the
kernels and the fields, the pipeline the entry. Nothing deeper in the call asks again, so
a call costs one lookup, and what the plugins offered cannot change half-way through it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rllm.config.names import EstimatorName, estimator_name, rLLMAdvantageEstimator
from rllm.contract.fields import BatchField
from rllm.errors import EstimatorNotFoundError
from rllm.estimators.acceleration import Kernels, kernels_of
from rllm.plugins.registry import EstimatorEntry

if TYPE_CHECKING:
    from rllm.plugins.discovery import Source
    from rllm.plugins.manager import PluginManager

__all__ = ["Resolved", "declared_fields", "estimator_entry", "resolve_plugins"]


@dataclass(frozen=True)
class Resolved:
    """The estimator entries, kernels and declared batch fields of one call, resolved at its door."""

    entries: Mapping[str, EstimatorEntry]
    """Each estimator the call runs, by the name it was asked for."""
    kernels: Kernels
    """The kernel plugins' primitives, for the batch's :class:`~rllm.estimators.layout.GroupLayout`."""
    fields: Mapping[str, BatchField]
    """Batch fields the installed plugins declare, by name."""
    field_sources: Mapping[str, Source]
    """Which plugin declared each field (named when its ``read`` fails)."""

    def entry(self, name: EstimatorName | None = None) -> EstimatorEntry:
        """The entry resolved for ``name``; without a name, the one estimator this door resolved."""
        if name is not None:
            return self.entries[estimator_name(name)]
        if len(self.entries) != 1:
            raise KeyError(f"{len(self.entries)} estimators were resolved ({', '.join(self.entries)}); name one.")
        return next(iter(self.entries.values()))


def estimator_entry(manager: PluginManager, name: EstimatorName) -> EstimatorEntry:
    """The registered estimator for ``name`` in ``manager``, with conflicts and unknown names reported."""
    if name is rLLMAdvantageEstimator.OTHER:
        raise EstimatorNotFoundError(
            "rLLMAdvantageEstimator.OTHER only marks a custom estimator; name the estimator by its "
            "registered string instead (e.g. adv_estimator: my_estimator)."
        )
    return manager.estimators.resolve(estimator_name(name))


def resolve_plugins(*estimators: EstimatorName | EstimatorEntry, manager: PluginManager | None = None) -> Resolved:
    """One call's :class:`Resolved`: the named estimators (an entry is kept as given), kernels and fields.

    ``manager`` is the plugin manager a door already holds (default: the process-wide one,
    asked for once here).
    """
    if manager is None:
        from rllm.plugins.manager import get_plugin_manager  # read at call time: the manager loads plugins

        manager = get_plugin_manager()
    entries: dict[str, EstimatorEntry] = {}
    for estimator in estimators:
        if isinstance(estimator, EstimatorEntry):
            entries[estimator.name] = estimator
        else:
            entries[estimator_name(estimator)] = estimator_entry(manager, estimator)
    claims = _field_claims(manager)
    return Resolved(
        entries=entries,
        kernels=kernels_of(manager.kernels),
        fields={name: claim.target for name, claim in claims.items()},
        field_sources={name: claim.source for name, claim in claims.items()},
    )


def declared_fields() -> dict[str, BatchField]:
    """Batch fields the installed plugins declare (``rllm_register_batch_fields``), by name.

    Asks the plugin manager now: for a batch built without a door's :class:`Resolved`.
    """
    from rllm.plugins.manager import get_plugin_manager

    return {name: claim.target for name, claim in _field_claims(get_plugin_manager()).items()}


def _field_claims(manager: PluginManager) -> dict[str, Any]:
    registry = manager.batch_fields
    return {name: registry.resolve(name) for name in registry.names()}
