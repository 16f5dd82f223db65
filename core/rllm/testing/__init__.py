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
from rllm.testing.parts import (
    check_batch_field,
    check_config_section,
    check_kernel,
    check_tracker,
    check_weight_sync,
)
from rllm.testing.trainer import STAGES, check_backend, check_grouping_hook, sample_episodes

__all__ = [
    "PROPERTIES",
    "STAGES",
    "Check",
    "Estimator",
    "Loss",
    "all_checks",
    "check_backend",
    "check_batch_field",
    "check_config_section",
    "check_grouping_hook",
    "check_kernel",
    "check_tracker",
    "check_weight_sync",
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
    """Every check for the parts named, plus (``plugin``) every part that plugin registers, of every hook kind."""
    from rllm.plugins.hook_kinds import HOOK_KINDS

    parts: dict[str, list[Any]] = {kind.attribute: [] for kind in HOOK_KINDS}
    parts["estimators"] += [e if isinstance(e, Estimator) else Estimator(e) for e in estimators]
    parts["grouping_hooks"] += grouping_hooks
    parts["backends"] += backends
    parts["losses"] += [item if isinstance(item, Loss) else Loss(item) for item in losses]
    if plugin is not None:
        owned = _owned_by(plugin)
        for attribute, names in owned.items():
            given = {getattr(part, "name", part) for part in parts[attribute]}
            parts[attribute] += [_PART[attribute](n) for n in names if n not in given]
    return [check for kind in HOOK_KINDS for part in parts[kind.attribute] for check in _CHECKS[kind.attribute](part)]


def _owned_by(plugin: str) -> dict[str, list[str]]:
    """The names ``plugin`` claims, per hook kind; a plugin that claims none is a named error."""
    from rllm.errors import ConformanceError
    from rllm.plugins.hook_kinds import HOOK_KINDS
    from rllm.plugins.manager import get_plugin_manager

    manager = get_plugin_manager()
    if plugin not in manager.plugins:
        by_module = [info.name for info in manager.plugins.values() if info.module and _is_in(plugin, info.module)]
        hint = (
            f" {plugin!r} is the module of plugin {by_module[0]!r}: pass plugin={by_module[0]!r}." if by_module else ""
        )
        raise ConformanceError(
            f"No plugin named {plugin!r} is loaded (plugin= takes the entry-point name `rllm plugins` lists: "
            f"{', '.join(sorted(manager.plugins))}).{hint}"
        )
    owned = {
        kind.attribute: [
            name
            for name in getattr(manager, kind.attribute)
            if any(c.source.plugin == plugin for c in getattr(manager, kind.attribute).claims(name))
        ]
        for kind in HOOK_KINDS
    }
    if not any(owned.values()):
        raise ConformanceError(f"plugin {plugin!r} registered nothing; check `rllm plugins` for its status")
    return owned


def _is_in(name: str, module: str) -> bool:
    """Whether ``name`` is the plugin's module or a package above it (``my_estimators`` of ``my_estimators.plugin``)."""
    return module == name or module.startswith(name + ".")


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


def _named(suffix: str, check: Callable[[str], None]) -> Callable[[str], list[Check]]:
    """The checks of a part known by name alone: one, ``<name>-<suffix>``."""

    def checks(name: str) -> list[Check]:
        return [Check(f"{name}-{suffix}", lambda: check(name))]

    return checks


def _estimator_checks(e: Estimator) -> list[Check]:
    return estimator_checks(e.name, properties=e.properties, options=e.options)


def _backend_checks(name: str) -> list[Check]:
    return [Check(f"{name}-backend_stages", _backend(name))]


def _loss_checks(item: Loss) -> list[Check]:
    return [Check(f"{item.name}-loss_{check}", _loss(item, check)) for check in _checks(item)]


_CHECKS: dict[str, Callable[[Any], list[Check]]] = {
    "estimators": _estimator_checks,
    "grouping_hooks": _named("grouping_hook", check_grouping_hook),
    "backends": _backend_checks,
    "kernels": _named("kernel", check_kernel),
    "batch_fields": _named("batch_field", check_batch_field),
    "losses": _loss_checks,
    "config_sections": _named("config_section", check_config_section),
    "weight_syncs": _named("weight_sync", check_weight_sync),
    "trackers": _named("tracker", check_tracker),
}
"""The checks of one part, by hook kind (``HookKind.attribute``); a test ties its keys to ``HOOK_KINDS``."""

_PART: dict[str, Callable[[str], Any]] = {"estimators": Estimator, "losses": Loss}
_PART.update({attribute: str for attribute in _CHECKS if attribute not in _PART})


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
