"""Each hook's ``register`` is typed on its own, and the ``register`` rllm passes has exactly that type.

A plugin author annotates a hook with its Protocol (``rllm.plugins.BackendRegistrar``, ...) and
may call ``register`` with the Protocol's parameter names; a call or an object that does not fit
is refused with one line naming the plugin.
"""

from __future__ import annotations

import inspect
import typing
from typing import Any

import numpy as np
import pytest

import rllm
import rllm.plugins
from rllm.config import ConfigKey
from rllm.errors import PluginContractError, PluginHookError, PluginWarning
from rllm.plugins import PluginManager, Source, hookspecs
from rllm.plugins.manager import HOOK_NAMES
from rllm.toolkit import BatchField, Option
from rllm_builtin.embedded.backend import EmbeddedBackend

SOURCE = Source("plugin", "acme", "acme-rl", "2.1")
NAMED = "plugin 'acme', distribution acme-rl 2.1"

PROTOCOLS = {
    "rllm_register_estimators": ("EstimatorRegistrar", ["name", "fn", "style", "requires", "options", "numerics"]),
    "rllm_register_grouping_hooks": ("GroupingHookRegistrar", ["name", "hook"]),
    "rllm_register_backends": ("BackendRegistrar", ["name", "backend_cls"]),
    "rllm_register_kernels": ("KernelRegistrar", ["name", "fn"]),
    "rllm_register_batch_fields": ("BatchFieldRegistrar", ["name", "field"]),
    "rllm_register_losses": (
        "LossRegistrar",
        ["name", "fn", "options", "aliases", "agg_modes", "needs_old_log_probs", "additive", "description"],
    ),
    "rllm_register_config_sections": ("ConfigSectionRegistrar", ["section", "keys"]),
    "rllm_register_weight_syncs": ("WeightSyncRegistrar", ["name", "sync_cls"]),
    "rllm_register_trackers": ("TrackerRegistrar", ["name", "tracker_cls"]),
}
"""Each hook's Protocol and the parameters a plugin author passes (``replace`` follows, but for sections)."""


def protocol_parameters(protocol: type) -> list[inspect.Parameter]:
    return list(inspect.signature(protocol.__call__).parameters.values())[1:]  # without self


def test_every_hook_has_a_protocol_listed_here() -> None:
    assert sorted(PROTOCOLS) == HOOK_NAMES


@pytest.mark.parametrize("hook_name", sorted(PROTOCOLS))
def test_each_hook_annotates_register_with_its_own_protocol(hook_name: str) -> None:
    protocol_name, parameters = PROTOCOLS[hook_name]
    annotation = typing.get_type_hints(getattr(hookspecs, hook_name))["register"]
    assert annotation is getattr(rllm.plugins, protocol_name)
    assert protocol_name in rllm.plugins.__all__
    assert getattr(annotation, "_is_protocol", False), f"{protocol_name} is not a typing.Protocol"
    assert (inspect.getdoc(annotation) or "").startswith(f"The ``register`` argument of :func:`{hook_name}`")
    names = [p.name for p in protocol_parameters(annotation)]
    assert names == (parameters if hook_name == "rllm_register_config_sections" else [*parameters, "replace"])


def test_no_two_hooks_share_a_protocol() -> None:
    annotations = [typing.get_type_hints(getattr(hookspecs, hook))["register"] for hook in HOOK_NAMES]
    assert len(set(annotations)) == len(HOOK_NAMES)


class Captures:
    """A plugin implementing every hook that keeps the ``register`` each hook receives."""

    def __init__(self) -> None:
        self.received: dict[str, Any] = {}
        for hook in HOOK_NAMES:
            setattr(self, hook, rllm.hookimpl(self._keeper(hook)))

    def _keeper(self, hook: str) -> Any:
        def implementation(register: Any) -> None:
            self.received[hook] = register

        return implementation


@pytest.mark.parametrize("hook_name", sorted(PROTOCOLS))
def test_the_register_rllm_passes_has_the_signature_of_its_protocol(
    plugin_manager: PluginManager, hook_name: str
) -> None:
    plugin = Captures()
    assert plugin_manager.register(plugin, SOURCE).status == "ok"
    protocol = getattr(rllm.plugins, PROTOCOLS[hook_name][0])
    signature = inspect.signature(plugin.received[hook_name])
    assert list(signature.parameters.values()) == protocol_parameters(protocol)
    assert signature.return_annotation == inspect.signature(protocol.__call__).return_annotation


def weighted(batch: rllm.AdvantageBatch) -> np.ndarray:
    """Group-centred reward times the trajectory's difficulty."""
    centred, _ = batch.layout.centred(batch.rewards)
    return centred * batch.require("difficulty_demo", "weighted_demo")


def by_task(episodes: list[Any], **options: Any) -> list[Any]:
    return []


class DemoBackend(EmbeddedBackend):
    """The embedded backend under another name."""


def sorted_runs(*args: Any) -> Any:
    return None


SECTION_KEYS = [ConfigKey("endpoint", "str", "localhost:9000", "Address of the demo service.")]
CLIP = Option("clip", (float,), 0.2, "clip range of the ratio", minimum=0.0)


class EveryKind:
    """A plugin that registers one thing of every kind, passing every argument by its Protocol's name."""

    @rllm.hookimpl
    def rllm_register_estimators(self, register: rllm.plugins.EstimatorRegistrar) -> None:
        register(
            name="weighted_demo",
            fn=weighted,
            style="batch",
            requires=["difficulty_demo"],
            options=[],
            numerics=False,
            replace=False,
        )

    @rllm.hookimpl
    def rllm_register_grouping_hooks(self, register: rllm.plugins.GroupingHookRegistrar) -> None:
        register(name="by_task_demo", hook=by_task, replace=False)

    @rllm.hookimpl
    def rllm_register_backends(self, register: rllm.plugins.BackendRegistrar) -> None:
        register(name="demo_backend", backend_cls=DemoBackend, replace=False)

    @rllm.hookimpl
    def rllm_register_kernels(self, register: rllm.plugins.KernelRegistrar) -> None:
        register(name="sorted_runs", fn=sorted_runs, replace=False)

    @rllm.hookimpl
    def rllm_register_batch_fields(self, register: rllm.plugins.BatchFieldRegistrar) -> None:
        register(name="difficulty_demo", field=BatchField(read=lambda t: 1.0, doc="number: difficulty"), replace=False)

    @rllm.hookimpl
    def rllm_register_losses(self, register: rllm.plugins.LossRegistrar) -> None:
        register(
            name="demo_pg",
            fn="demo_package.losses:demo_pg",
            options=[CLIP],
            aliases=["demo_alias"],
            agg_modes=["token-mean"],
            needs_old_log_probs=False,
            description="a demo loss",
            replace=False,
        )

    @rllm.hookimpl
    def rllm_register_config_sections(self, register: rllm.plugins.ConfigSectionRegistrar) -> None:
        register(section="rllm.demo_backend", keys=SECTION_KEYS)


def test_a_plugin_registers_one_thing_of_every_kind_by_keyword(plugin_manager: PluginManager) -> None:
    info = plugin_manager.register(EveryKind(), SOURCE)
    assert (info.status, info.error) == ("ok", None)
    assert (info.estimators, info.grouping_hooks, info.backends, info.kernels) == (
        ["weighted_demo"],
        ["by_task_demo"],
        ["demo_backend"],
        ["sorted_runs"],
    )
    assert (info.batch_fields, info.losses, info.config_sections) == (
        ["difficulty_demo"],
        ["demo_pg", "demo_alias"],
        ["rllm.demo_backend"],
    )
    estimator = plugin_manager.estimators.resolve("weighted_demo")
    assert (estimator.target, estimator.style, estimator.requires, estimator.source) == (
        weighted,
        "batch",
        ("difficulty_demo",),
        SOURCE,
    )
    assert plugin_manager.grouping_hooks.resolve("by_task_demo").target is by_task
    assert plugin_manager.backends.resolve("demo_backend").target is DemoBackend
    assert plugin_manager.kernels.resolve("sorted_runs").target is sorted_runs
    assert isinstance(plugin_manager.batch_fields.resolve("difficulty_demo").target, BatchField)
    loss = plugin_manager.losses.resolve("demo_pg")
    assert (loss.target, loss.options, loss.agg_modes, loss.needs_old_log_probs, loss.doc) == (
        "demo_package.losses:demo_pg",
        (CLIP,),
        ("token-mean",),
        False,
        "a demo loss",
    )
    assert plugin_manager.losses.resolve("demo_alias").alias_of == "demo_pg"
    assert plugin_manager.config_sections.resolve("rllm.demo_backend").target == tuple(SECTION_KEYS)
    # The estimator reads the field the same plugin declared: groups a (1, 3) and b (2, 6), centred to
    # (-1, 1) and (-2, 2), times difficulties (0.5, 0.5) and (2, 2).
    advantages = rllm.compute_advantages(
        "weighted_demo", [1.0, 3.0, 2.0, 6.0], ["a", "a", "b", "b"], difficulty_demo=[0.5, 0.5, 2.0, 2.0]
    )
    np.testing.assert_allclose(advantages, [-0.5, 0.5, -4.0, 4.0])


class Calls:
    """A plugin whose hook makes one ``register(*args, **kwargs)`` call."""

    def __init__(self, hook: str, *args: Any, **kwargs: Any) -> None:
        def implementation(register: Any) -> None:
            register(*args, **kwargs)

        setattr(self, hook, rllm.hookimpl(implementation))


def refusal(manager: PluginManager, plugin: object) -> str:
    """The one-line PluginContractError that failed ``plugin``, after checking that nothing of it stayed."""
    with pytest.warns(PluginWarning, match="rllm plugin 'acme'"):
        info = manager.register(plugin, SOURCE)
    assert info.status == "failed"
    assert all(getattr(info, kind) == [] for kind in ("estimators", "grouping_hooks", "backends", "kernels"))
    error = manager.failures[-1]
    assert isinstance(error, PluginContractError)
    assert "\n" not in str(error) and f"{NAMED} registered" in str(error)
    return str(error.__cause__)


@pytest.mark.parametrize(
    ("hook", "args", "problem"),
    [
        ("rllm_register_estimators", ("x", 42), "registered estimator 'x' with a non-callable 42"),
        ("rllm_register_grouping_hooks", ("x", 42), "registered grouping hook 'x', which is 42, which is not callable"),
        ("rllm_register_backends", ("x", len), "registered backend 'x', which is <built-in function len>, not a class"),
        ("rllm_register_kernels", ("sorted_runs", 42), "registered kernel 'sorted_runs', which is 42, which is not"),
        ("rllm_register_batch_fields", ("difficulty", len), "which is <built-in function len>, not an rllm.toolkit"),
        ("rllm_register_losses", ("x", 42), "registered loss 'x' with a non-callable 42"),
        ("rllm_register_config_sections", ("rllm.x", ["endpoint"]), "declares 'endpoint', which is not a rllm.config"),
        ("rllm_register_config_sections", ("rllm.x", 5), "registered config section 'rllm.x' with keys=5; give a list"),
    ],
    ids=["estimator", "grouping-hook", "backend", "kernel", "batch-field", "loss", "section-key", "section-keys"],
)
def test_a_wrong_object_is_refused_naming_the_plugin(
    plugin_manager: PluginManager, hook: str, args: tuple[Any, ...], problem: str
) -> None:
    assert problem in refusal(plugin_manager, Calls(hook, *args))


@pytest.mark.parametrize(
    ("hook", "args", "kwargs", "problem"),
    [
        (
            "rllm_register_grouping_hooks",
            ("x", len),
            {"replac": True},
            "registered grouping hook 'x' with unknown keyword 'replac' (did you mean 'replace'?); "
            "register() accepts name, hook, replace.",
        ),
        (
            "rllm_register_backends",
            (),
            {"name": "x", "target": DemoBackend},
            "registered backend 'x' with unknown keyword 'target'; register() accepts name, backend_cls, replace.",
        ),
        (
            "rllm_register_estimators",
            ("x", weighted),
            {"requiers": ["difficulty_demo"]},
            "registered estimator 'x' with unknown keyword 'requiers' (did you mean 'requires'?)",
        ),
        (
            "rllm_register_kernels",
            ("sorted_runs",),
            {},
            "registered kernel 'sorted_runs' with arguments that do not fit register(name, fn, *, replace=False): "
            "missing a required argument: 'fn'.",
        ),
        (
            "rllm_register_batch_fields",
            ("difficulty", BatchField(read=len), True),
            {},
            "registered batch field 'difficulty' with arguments that do not fit register(name, field, *, "
            "replace=False): too many positional arguments.",
        ),
    ],
    ids=["typo", "old-keyword", "estimator-typo", "missing", "replace-positional"],
)
def test_a_call_that_does_not_fit_the_protocol_is_refused_naming_the_plugin(
    plugin_manager: PluginManager, hook: str, args: tuple[Any, ...], kwargs: dict[str, Any], problem: str
) -> None:
    assert problem in refusal(plugin_manager, Calls(hook, *args, **kwargs))


def test_a_type_error_from_inside_a_call_that_fits_stays_the_hooks_error(plugin_manager: PluginManager) -> None:
    def keys() -> Any:
        raise TypeError("the plugin's own mistake")
        yield

    with pytest.warns(PluginWarning, match="its registration hook raised TypeError: the plugin's own mistake"):
        info = plugin_manager.register(Calls("rllm_register_config_sections", "rllm.x", keys()), SOURCE)
    assert info.status == "failed"
    assert type(plugin_manager.failures[-1]) is PluginHookError


def test_a_loss_alias_equal_to_its_own_name_is_refused(plugin_manager: PluginManager) -> None:
    plugin = Calls("rllm_register_losses", "x", "demo_package.losses:demo_pg", aliases=["y", "x"])
    assert "registered loss 'x' with its own name among aliases=['y', 'x']; drop it." in refusal(plugin_manager, plugin)
