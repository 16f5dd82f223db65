"""The plugin author's conformance kit: prove an estimator, grouping hook or backend keeps rllm's contract.

One line in your plugin's tests (pytest finds the fixtures through this distribution's ``pytest11``
entry point)::

    from rllm.testing import Estimator, parametrize_with_checks

    @parametrize_with_checks(Estimator("my_estimator", properties=["zero_mean", "shift_invariant"]),
                             grouping_hooks=["my_grouping"], backends=["my_backend"], losses=["my_loss"])
    def test_conformance(check):
        check()

or ``plugin="my_plugin"`` to check everything that plugin registers. Every check runs the
plugin through a door users use (``rllm.compute_advantages``, the trainer's collection and
grouping steps, a two-step training run, ``rllm.losses.compute_policy_loss``) and fails with
:class:`rllm.errors.ConformanceError` naming the property and the input that broke it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rllm.testing.estimators import PROPERTIES, Check, estimator_checks
from rllm.testing.trainer import STAGES, check_backend, check_grouping_hook, sample_episodes

__all__ = [
    "PROPERTIES",
    "STAGES",
    "Check",
    "Estimator",
    "Loss",
    "all_checks",
    "check_backend",
    "check_grouping_hook",
    "estimator_checks",
    "parametrize_with_checks",
    "sample_episodes",
]


@dataclass(frozen=True)
class Estimator:
    """An estimator to check: its registered name, the group-wise properties it claims, options it needs."""

    name: str
    properties: Sequence[str] = ()
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Loss:
    """A policy loss to check: its registered name and the options it needs to run."""

    name: str
    options: Mapping[str, Any] = field(default_factory=dict)


def all_checks(
    *estimators: Estimator | str,
    grouping_hooks: Sequence[str] = (),
    backends: Sequence[str] = (),
    losses: Sequence[Loss | str] = (),
    plugin: str | None = None,
) -> list[Check]:
    """Every check for the parts named, plus (``plugin``) every part that plugin registers."""
    from rllm.plugins.manager import get_plugin_manager

    wanted = [e if isinstance(e, Estimator) else Estimator(e) for e in estimators]
    hooks, kinds = list(grouping_hooks), list(backends)
    loss_specs = [item if isinstance(item, Loss) else Loss(item) for item in losses]
    if plugin is not None:
        manager = get_plugin_manager()
        if plugin not in {
            c.source.plugin
            for r in (manager.estimators, manager.grouping_hooks, manager.backends, manager.losses)
            for n in r
            for c in r.claims(n)
        }:
            from rllm.errors import ConformanceError

            raise ConformanceError(f"plugin {plugin!r} registered nothing; check `rllm plugins` for its status")

        def own(registry: Any) -> list[str]:
            return [n for n in registry if any(c.source.plugin == plugin for c in registry.claims(n))]

        named = {e.name for e in wanted}
        wanted += [Estimator(n) for n in own(manager.estimators) if n not in named]
        hooks += [n for n in own(manager.grouping_hooks) if n not in hooks]
        kinds += [n for n in own(manager.backends) if n not in kinds]
        given_losses = {item.name for item in loss_specs}
        loss_specs += [Loss(n) for n in own(manager.losses) if n not in given_losses]
    found = [c for e in wanted for c in estimator_checks(e.name, properties=e.properties, options=e.options)]
    found += [Check(f"{n}-grouping_hook", _hook(n)) for n in hooks]
    found += [Check(f"{n}-backend_stages", _backend(n)) for n in kinds]
    found += [Check(f"{item.name}-loss_{check}", _loss(item, check)) for item in loss_specs for check in _checks(item)]
    return found


def _hook(name: str) -> Callable[[], None]:
    return lambda: check_grouping_hook(name)


def _checks(item: Loss) -> list[str]:
    from rllm.testing.losses import loss_check_names  # imports torch only when a check runs

    return loss_check_names(item.name)


def _loss(item: Loss, check: str) -> Callable[[], None]:
    def run() -> None:
        from rllm.testing.losses import LOSS_CHECKS

        LOSS_CHECKS[check](item.name, item.options)

    return run


def _backend(name: str) -> Callable[[], None]:
    def run() -> None:
        import tempfile
        from pathlib import Path

        with tempfile.TemporaryDirectory(prefix="rllm-backend-check-") as tmp:
            check_backend(name, Path(tmp))

    return run


def parametrize_with_checks(
    *estimators: Estimator | str,
    grouping_hooks: Sequence[str] = (),
    backends: Sequence[str] = (),
    losses: Sequence[Loss | str] = (),
    plugin: str | None = None,
) -> Any:
    """A ``pytest.mark.parametrize`` over :func:`all_checks`, one test per check, named by part and property."""
    import pytest

    checks = all_checks(*estimators, grouping_hooks=grouping_hooks, backends=backends, losses=losses, plugin=plugin)
    return pytest.mark.parametrize("check", checks, ids=[c.id for c in checks])
