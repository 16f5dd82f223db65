"""The plugin contract, checked in process: what registration accepts, refuses and warns about.

Each refusal must name the plugin and fail the whole plugin, leaving none of its entries behind.
Installed distributions exercising the same rules end to end are in test_hooks.py.
"""

from __future__ import annotations

import inspect
import subprocess
import sys
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import rllm
from rllm.errors import (
    BackendConflictError,
    BackendNotFoundError,
    EstimatorConflictError,
    EstimatorNotFoundError,
    GroupingHookNotFoundError,
    KernelNotFoundError,
    NameNotFoundError,
    PluginContractError,
    PluginHookError,
    PluginLoadError,
    PluginsFailedError,
    PluginWarning,
)
from rllm.plugins import PluginManager, Source, hookspecs
from rllm.plugins import discovery as discovery_module
from rllm.plugins import manager as manager_module
from rllm.plugins.discovery import Discovered
from rllm.plugins.hook_kinds import HOOK_KIND
from rllm.trainer.protocol import BackendProtocol
from rllm_builtin.embedded.backend import EmbeddedBackend

SOURCE = Source("plugin", "acme", "acme-rl", "2.1")
NAMED = "plugin 'acme', distribution acme-rl 2.1"


class Registers:
    """A plugin whose hook of the given kind registers ``(name, target, replace)`` claims."""

    def __init__(self, hook: str, *claims: tuple[str, Any, bool]) -> None:
        def implementation(register: Any) -> None:
            for name, target, replace in claims:
                register(name, target, replace=replace)

        setattr(self, hook, rllm.hookimpl(implementation))


def failed(manager: PluginManager, plugin: object, source: Source = SOURCE) -> str:
    """Register a plugin expected to fail; its error as ``rllm plugins`` reports it, after checking the warning."""
    with pytest.warns(PluginWarning, match=f"rllm plugin '{source.plugin}'.*{source.distribution} {source.version}"):
        info = manager.register(plugin, source)
    assert info.status == "failed"
    assert (info.estimators, info.grouping_hooks, info.backends, info.kernels) == ([], [], [], [])
    assert not manager.hooks.is_registered(plugin)
    return info.error or ""


class Duck:
    """Every protocol method, duck-typed, without subclassing."""

    def __init__(self, config: Any, algorithm: Any) -> None: ...


for _method, _is_async in hookspecs.BACKEND_METHODS.items():

    async def _async_stub(self: Any, *args: Any, **kwargs: Any) -> None: ...

    def _stub(self: Any, *args: Any, **kwargs: Any) -> None: ...

    setattr(Duck, _method, _async_stub if _is_async else _stub)


class Lazy(BackendProtocol):
    """Subclasses the protocol but leaves its required stages to the base."""


class SyncUpdate(EmbeddedBackend):
    def update_policy(self, trainer_state: Any) -> None:  # type: ignore[override]
        """Not async: the trainer would await None."""


class NoConfig(EmbeddedBackend):
    def __init__(self) -> None:  # type: ignore[override]
        """Cannot be built as backend_cls(config=..., algorithm=...)."""


class Partial:
    async def update_policy(self, trainer_state: Any) -> None: ...


@pytest.mark.parametrize(
    ("backend", "problem"),
    [
        (object(), "not a class"),
        (Partial, "has no method init_rollout_engine()"),
        (Lazy, "does not override init_rollout_engine(), does not override get_dataloader()"),
        (SyncUpdate, "update_policy() must be async def"),
        (NoConfig, "cannot be constructed as backend_cls(config=..., algorithm=...)"),
    ],
    ids=["instance", "partial", "lazy", "sync", "no-config"],
)
def test_backend_must_implement_the_protocol(plugin_manager: PluginManager, backend: Any, problem: str) -> None:
    error = failed(plugin_manager, Registers("rllm_register_backends", ("mine", backend, False)))
    assert error.startswith(f"PluginContractError: {NAMED} registered backend 'mine', which ")
    assert problem in error
    with pytest.raises(BackendNotFoundError):
        plugin_manager.backends.resolve("mine")


@pytest.mark.parametrize("backend", [Duck, EmbeddedBackend], ids=["duck-typed", "subclass"])
def test_backend_implementing_the_protocol_is_registered(plugin_manager: PluginManager, backend: type) -> None:
    plugin_manager.register(Registers("rllm_register_backends", ("mine", backend, False)), SOURCE)
    assert plugin_manager.backends.resolve("mine").target is backend


def test_backend_methods_listed_for_the_check_match_the_protocol() -> None:
    methods = {
        name: inspect.iscoroutinefunction(fn)
        for name, fn in vars(BackendProtocol).items()
        if inspect.isfunction(fn) and not name.startswith("_")
    }
    assert methods == hookspecs.BACKEND_METHODS
    abstract = {
        name for name in methods if "raise NotImplementedError" in inspect.getsource(vars(BackendProtocol)[name])
    }
    assert abstract == set(hookspecs.BACKEND_ABSTRACT_METHODS)


def test_checking_a_backend_imports_no_trainer() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from rllm.plugins.hook_kinds import backend_problem\n"
            "class B:\n    pass\n"
            "print(backend_problem('b', B) is not None, 'rllm.trainer' in sys.modules)",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout.split() == ["True", "False"], done.stderr


@pytest.mark.parametrize(
    ("hook", "name", "target", "problem"),
    [
        ("rllm_register_grouping_hooks", "mine", 42, "grouping hook 'mine', which is 42, which is not callable"),
        (
            "rllm_register_kernels",
            "sorted_runs",
            "fast",
            "kernel 'sorted_runs', which is 'fast', which is not callable",
        ),
        ("rllm_register_kernels", "sorted_run", len, "is not a kernel rllm uses (did you mean 'sorted_runs'?)"),
        ("rllm_register_estimators", "mine", None, "estimator 'mine' with a non-callable None"),
        ("rllm_register_grouping_hooks", "", len, "registered a grouping hook with an invalid name ''"),
    ],
    ids=["grouping-hook", "kernel", "kernel-name", "estimator", "empty-name"],
)
def test_registered_objects_are_checked(
    plugin_manager: PluginManager, hook: str, name: str, target: Any, problem: str
) -> None:
    error = failed(plugin_manager, Registers(hook, (name, target, False)))
    assert NAMED in error and problem in error


def test_a_refusal_rolls_back_what_the_plugin_registered_first(plugin_manager: PluginManager) -> None:
    plugin = Registers("rllm_register_grouping_hooks", ("good", len, False), ("bad", 42, False))
    failed(plugin_manager, plugin)
    with pytest.raises(GroupingHookNotFoundError):
        plugin_manager.grouping_hooks.resolve("good")


@pytest.mark.parametrize("option", hookspecs.REFUSED_HOOKIMPL_OPTIONS)
def test_hookimpl_options_rllm_does_not_honour_are_refused(plugin_manager: PluginManager, option: str) -> None:
    class Ordered:
        @rllm.hookimpl(**{option: True})
        def rllm_register_estimators(self, register: Any) -> Any:
            register("ordered", lambda rewards, **kw: rewards)
            yield

    error = failed(plugin_manager, Ordered())
    assert f"its hook rllm_register_estimators is marked @rllm.hookimpl({option}=True)" in error
    with pytest.raises(EstimatorNotFoundError):
        plugin_manager.estimators.resolve("ordered")


def test_system_exit_in_a_hook_is_a_plugin_failure(plugin_manager: PluginManager) -> None:
    class Exits:
        @rllm.hookimpl
        def rllm_register_estimators(self, register: Any) -> None:
            raise SystemExit(4)

    assert failed(plugin_manager, Exits()) == "SystemExit: 4"
    assert plugin_manager.failures[-1].__class__ is PluginHookError


def test_keyboard_interrupt_in_a_hook_still_stops_the_program(plugin_manager: PluginManager) -> None:
    class Interrupted:
        @rllm.hookimpl
        def rllm_register_estimators(self, register: Any) -> None:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        plugin_manager.register(Interrupted(), SOURCE)


def test_what_a_hook_prints_goes_to_stderr(plugin_manager: PluginManager, capsys: pytest.CaptureFixture[str]) -> None:
    class Chatty:
        @rllm.hookimpl
        def rllm_register_estimators(self, register: Any) -> None:
            print("registering!")
            register("chatty", lambda rewards, **kw: rewards)

    plugin_manager.register(Chatty(), SOURCE)
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", "registering!\n")


def test_shadowing_a_builtin_warns_for_every_kind(plugin_manager: PluginManager) -> None:
    builtin = Source("builtin", "builtin", "rllm", "test")
    plugin_manager.add(HOOK_KIND["kernels"], "sorted_runs", len, builtin)  # the built-in plugin registers no kernel yet
    shadow = {
        "rllm_register_estimators": ("grpo", lambda rewards, **kw: rewards),
        "rllm_register_grouping_hooks": ("task_and_role", len),
        "rllm_register_backends": ("embedded", Duck),
        "rllm_register_kernels": ("sorted_runs", max),
    }
    for hook, (name, target) in shadow.items():
        plugin_manager.register(Registers(hook, (name, target, False)), Source("plugin", hook, "shadow", "1"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plugin_manager.warn_ignored()
    messages = [str(w.message) for w in caught if w.category is PluginWarning]
    assert {m.split(" registers ")[1].split(",")[0] for m in messages} == {
        "backend 'embedded'",
        "estimator 'grpo'",
        "grouping hook 'task_and_role'",
        "kernel 'sorted_runs'",
    }
    assert len(messages) == 4
    assert all("which is built in; the built-in is kept" in m and "replace=True" in m for m in messages)
    assert plugin_manager.kernels.resolve("sorted_runs").target is len
    assert plugin_manager.backends.resolve("embedded").target is EmbeddedBackend


def test_replace_true_takes_a_builtin_name_without_warning(plugin_manager: PluginManager) -> None:
    plugin_manager.register(Registers("rllm_register_grouping_hooks", ("task_and_role", len, True)), SOURCE)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plugin_manager.warn_ignored()
    assert plugin_manager.grouping_hooks.resolve("task_and_role").target is len
    assert {i.name: i.status for i in plugin_manager.plugin_infos()} == {"builtin": "ok", "acme": "ok"}


def test_a_claim_without_replace_loses_to_a_plugin_that_replaced_the_builtin(plugin_manager: PluginManager) -> None:
    plugin_manager.register(Registers("rllm_register_grouping_hooks", ("task_and_role", len, True)), SOURCE)
    late = Source("plugin", "late", "late-dist", "0.1")
    plugin_manager.register(Registers("rllm_register_grouping_hooks", ("task_and_role", max, False)), late)
    with pytest.warns(PluginWarning, match=f"plugin 'late'.*which is built in; {NAMED} took it over with replace=True"):
        plugin_manager.warn_ignored()
    assert plugin_manager.grouping_hooks.resolve("task_and_role").target is len
    infos = {i.name: i for i in plugin_manager.plugin_infos()}
    assert (infos["builtin"].status, infos["acme"].status, infos["late"].status) == ("ok", "ok", "conflict")
    assert f"({NAMED} took it over with replace=True and is used)" in (infos["late"].error or "")


@pytest.mark.parametrize(
    ("kind", "not_found", "conflict"),
    [
        (HOOK_KIND["grouping_hooks"], GroupingHookNotFoundError, "GroupingHookConflictError"),
        (HOOK_KIND["backends"], BackendNotFoundError, "BackendConflictError"),
        (HOOK_KIND["kernels"], KernelNotFoundError, "KernelConflictError"),
    ],
    ids=lambda v: getattr(v, "what", None),
)
def test_each_kind_has_its_own_error_types(
    plugin_manager: PluginManager, kind: Any, not_found: type, conflict: str
) -> None:
    registry = plugin_manager.registry(kind)
    with pytest.raises(not_found) as missing:
        registry.resolve("nothing")
    assert isinstance(missing.value, NameNotFoundError) and not isinstance(missing.value, EstimatorNotFoundError)
    for plugin, target in (("a", (EmbeddedBackend, len)), ("b", (Duck, max))):
        claim = ("sorted_runs", target[kind.what != "backend"], False)
        plugin_manager.register(Registers(kind.hook, claim), Source("plugin", plugin, plugin))
    with pytest.raises(Exception) as clash:
        registry.resolve("sorted_runs")
    assert type(clash.value).__name__ == conflict
    assert not isinstance(clash.value, EstimatorConflictError)


def test_error_types_say_what_went_wrong() -> None:
    assert issubclass(PluginLoadError, ImportError)
    assert not issubclass(PluginHookError, ImportError)
    assert issubclass(EstimatorNotFoundError, ValueError) and issubclass(EstimatorNotFoundError, NameNotFoundError)
    assert not issubclass(BackendNotFoundError, EstimatorNotFoundError)
    assert not issubclass(BackendConflictError, EstimatorConflictError)


def test_estimator_declaration_is_forwarded_and_unknown_keywords_refused(plugin_manager: PluginManager) -> None:
    def fn(batch: Any, **options: Any) -> Any:
        return batch.rewards

    plugin_manager.add_estimator("lengthy", fn, SOURCE, style="batch", requires=["response_lengths"])
    entry = plugin_manager.estimators.resolve("lengthy")
    assert (entry.style, entry.requires, entry.source) == ("batch", ("response_lengths",), SOURCE)
    with pytest.raises(
        PluginContractError,
        match=rf"{NAMED} registered estimator 'x' with unknown keyword 'requiers' \(did you mean 'requires'\?\)",
    ):
        plugin_manager.add_estimator("x", fn, SOURCE, requiers=["response_lengths"])
    for requires in ("response_lengths", None):
        with pytest.raises(PluginContractError, match=f"{NAMED} registered estimator 'x' with requires={requires!r}"):
            plugin_manager.add_estimator("x", fn, SOURCE, requires=requires)


class FakeEntryPoint:
    """An entry point whose module import runs ``load``."""

    def __init__(self, name: str, load: Callable[[], object]) -> None:
        self.name, self.value, self.module, self._load = name, f"fake_{name}.plugin", f"fake_{name}.plugin", load

    def load(self) -> object:
        return self._load()


def _missing_dependency() -> object:
    raise ModuleNotFoundError("No module named 'gpu_stack'")


class _HookRaises:
    @rllm.hookimpl
    def rllm_register_estimators(self, register: Any) -> None:
        raise RuntimeError("database unreachable")


class _Works:
    @rllm.hookimpl
    def rllm_register_estimators(self, register: Any) -> None:
        register("works", lambda rewards, **kw: [np.ones(len(g)) for g in rewards])


def test_strict_mode_loads_everything_then_raises_one_error_and_keeps_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from rllm_builtin import plugin as builtin_plugin

    entries = {
        "builtin": (FakeEntryPoint("builtin", lambda: builtin_plugin), "builtin"),
        "importfails": (FakeEntryPoint("importfails", _missing_dependency), "plugin"),
        "hookraises": (FakeEntryPoint("hookraises", lambda: _HookRaises()), "plugin"),
        "contract": (
            FakeEntryPoint("contract", lambda: Registers("rllm_register_kernels", ("nope", len, False))),
            "plugin",
        ),
        "works": (FakeEntryPoint("works", lambda: _Works()), "plugin"),
    }
    found = [Discovered(ep, Source(kind, name, f"dist-{name}", "1.0")) for name, (ep, kind) in entries.items()]
    monkeypatch.setattr(discovery_module, "_discovered", found)
    monkeypatch.setattr(manager_module, "_manager", None)
    monkeypatch.setenv("RLLM_STRICT_PLUGINS", "1")
    with pytest.raises(PluginsFailedError) as err:
        rllm.get_plugin_manager()
    assert [(type(f).__name__, f.args[0].split("'")[1]) for f in err.value.failures] == [
        ("PluginLoadError", "importfails"),
        ("PluginHookError", "hookraises"),
        ("PluginContractError", "contract"),
    ]
    message = str(err.value)
    assert "3 plugin(s) failed" in message and "gpu_stack" in message and "database unreachable" in message
    assert manager_module._manager is None  # nothing half-loaded is kept

    monkeypatch.setenv("RLLM_DISABLED_PLUGINS", "importfails,hookraises,contract")
    manager = rllm.get_plugin_manager()
    assert manager.failures == []
    assert rllm.compute_advantages("works", [3.0], [0]).tolist() == [1.0]
    assert rllm.compute_advantages("grpo", [1.0, 0.0], [0, 0]).round(4).tolist() == [1.0, -1.0]
