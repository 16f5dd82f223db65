"""Registry rules, exercised with in-process plugins (installed distributions are in tests/plugins)."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

import rllm
from rllm import (
    EstimatorConflictError,
    EstimatorNotFoundError,
    EstimatorOutputError,
    PluginError,
    PluginWarning,
)
from rllm.errors import PluginHookError
from rllm.plugins import PluginManager, Source


def constant(value: float) -> Any:
    def estimator(rewards: list[np.ndarray], **kwargs: Any) -> list[np.ndarray]:
        return [np.full(len(g), value) for g in rewards]

    return estimator


class Claims:
    """A plugin registering the given estimators."""

    def __init__(self, **estimators: Any) -> None:
        self.estimators = estimators

    @rllm.hookimpl
    def rllm_register_estimators(self, register: Any) -> None:
        for name, spec in self.estimators.items():
            fn, replace = spec if isinstance(spec, tuple) else (spec, False)
            register(name, fn, replace=replace)


def plugin_source(name: str, dist: str, version: str = "1.0") -> Source:
    return Source("plugin", name, dist, version)


def value_of(manager: PluginManager, name: str) -> float:
    entry = manager.estimators.resolve(name)
    return float(entry.target(rewards=[np.zeros(1)])[0][0])


def test_two_plugins_on_one_name_conflict_only_on_that_name(plugin_manager: PluginManager) -> None:
    plugin_manager.register(Claims(shared=constant(1), mine=constant(2)), plugin_source("a", "dist-a", "1.2"))
    plugin_manager.register(Claims(shared=constant(3)), plugin_source("b", "dist-b", "0.9"))
    with pytest.raises(EstimatorConflictError) as err:
        rllm.compute_advantages("shared", [1.0], [0])
    message = str(err.value)
    for part in ("'shared'", "plugin 'a'", "dist-a 1.2", "plugin 'b'", "dist-b 0.9"):
        assert part in message
    assert value_of(plugin_manager, "mine") == 2.0
    statuses = {info.name: info.status for info in plugin_manager.plugin_infos()}
    assert statuses == {"builtin": "ok", "a": "conflict", "b": "conflict"}


def test_plugin_cannot_take_builtin_name_without_replace(plugin_manager: PluginManager) -> None:
    plugin_manager.register(Claims(grpo=constant(9)), plugin_source("sneaky", "dist-s"))
    # GRPO on [1, 0]: +-0.5 / (0.5 + 1e-6), the built-in's answer, not 9.
    np.testing.assert_allclose(rllm.compute_advantages("grpo", [1.0, 0.0], [0, 0]), [0.999998, -0.999998], rtol=1e-5)
    assert {i.name: i.status for i in plugin_manager.plugin_infos()}["sneaky"] == "conflict"


def test_plugin_replaces_builtin_when_it_says_so(plugin_manager: PluginManager) -> None:
    plugin_manager.register(Claims(grpo=(constant(9), True)), plugin_source("better", "dist-b"))
    np.testing.assert_array_equal(rllm.compute_advantages("grpo", [1.0, 0.0], [0, 0]), [9.0, 9.0])


def test_same_plugin_object_twice_is_not_a_conflict(plugin_manager: PluginManager) -> None:
    plugin = Claims(twice=constant(4))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plugin_manager.register(plugin, plugin_source("one", "dist-one"))
        plugin_manager.register(plugin, plugin_source("one", "dist-one"))
    assert value_of(plugin_manager, "twice") == 4.0
    assert [i.status for i in plugin_manager.plugin_infos()] == ["ok", "ok"]


@pytest.mark.parametrize("name", ["grpo", "rloo"])
def test_runtime_registration_of_a_builtin_name_needs_replace(plugin_manager: PluginManager, name: str) -> None:
    """As a plugin's claim on a built-in name is ignored without replace=True, user code's is refused."""
    with pytest.raises(rllm.EstimatorConflictError, match=f"estimator '{name}', a name of built-in plugin 'builtin'"):
        rllm.register_rllm_adv_estimator(name)(constant(1))
    # The built-in stays: rewards [1, 2] in one group, mean 1.5 -> grpo +-0.5/(0.5+1e-6), rloo (1-2), (2-1).
    expected = [-0.5 / 0.500001, 0.5 / 0.500001] if name == "grpo" else [-1.0, 1.0]
    np.testing.assert_allclose(rllm.compute_advantages(name, [1.0, 2.0], [0, 0]), expected)

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # replace=True says it is on purpose: no warning
        rllm.register_rllm_adv_estimator("rloo", replace=True)(constant(5))
    np.testing.assert_array_equal(rllm.compute_advantages("rloo", [1.0, 2.0], [0, 0]), [5.0, 5.0])


def test_reregistering_the_same_definition_updates_it(plugin_manager: PluginManager) -> None:
    for value in (1.0, 2.0):  # like a notebook cell run twice

        def cell_estimator(rewards: list[np.ndarray], value: float = value, **kwargs: Any) -> list[np.ndarray]:
            return [np.full(len(g), value) for g in rewards]

        rllm.register_rllm_adv_estimator("cell")(cell_estimator)
    np.testing.assert_array_equal(rllm.compute_advantages("cell", [0.0], [0]), [2.0])


def test_registry_view_assignment_and_deletion(plugin_manager: PluginManager) -> None:
    from rllm.experimental.common.advantage import RLLM_ADV_ESTIMATOR_REGISTRY

    RLLM_ADV_ESTIMATOR_REGISTRY["assigned"] = constant(7)
    advantages, returns = RLLM_ADV_ESTIMATOR_REGISTRY["assigned"](rewards=[np.zeros(2)])
    assert advantages[0].tolist() == returns[0].tolist() == [7.0, 7.0]
    del RLLM_ADV_ESTIMATOR_REGISTRY["assigned"]
    assert "assigned" not in RLLM_ADV_ESTIMATOR_REGISTRY
    with pytest.raises(KeyError):
        del RLLM_ADV_ESTIMATOR_REGISTRY["grpo"]  # built-ins cannot be deleted through the view
    with pytest.raises(KeyError, match="Unknown estimator"):
        RLLM_ADV_ESTIMATOR_REGISTRY["nope"]


def test_hook_that_raises_is_reported_and_rolled_back(plugin_manager: PluginManager) -> None:
    class HalfBroken:
        @rllm.hookimpl
        def rllm_register_estimators(self, register: Any) -> None:
            register("half", constant(1))
            raise RuntimeError("database unreachable")

    with pytest.warns(PluginWarning, match=r"'halfbroken'.*dist-h 3\.1.*RuntimeError: database unreachable"):
        info = plugin_manager.register(HalfBroken(), plugin_source("halfbroken", "dist-h", "3.1"))
    assert info.status == "failed"
    with pytest.raises(EstimatorNotFoundError):
        plugin_manager.estimators.resolve("half")


def test_strict_mode_turns_failures_into_errors(plugin_manager: PluginManager, monkeypatch: pytest.MonkeyPatch) -> None:
    class Broken:
        @rllm.hookimpl
        def rllm_register_estimators(self, register: Any) -> None:
            raise RuntimeError("boom")

    monkeypatch.setenv("RLLM_STRICT_PLUGINS", "1")
    with pytest.raises(PluginHookError, match="'broken'"):
        plugin_manager.register(Broken(), plugin_source("broken", "dist-x"))


def test_hook_with_a_misspelled_name_is_rejected(plugin_manager: PluginManager) -> None:
    class Misspelled:
        @rllm.hookimpl
        def rllm_register_estimator(self, register: Any) -> None:  # missing the final "s"
            register("never", constant(1))

    with pytest.warns(
        PluginWarning,
        match="'misspelled'.*unknown hooks 'rllm_register_estimator' .did you mean 'rllm_register_estimators'",
    ):
        info = plugin_manager.register(Misspelled(), plugin_source("misspelled", "dist-m"))
    assert info.status == "failed"
    with pytest.raises(EstimatorNotFoundError):
        plugin_manager.estimators.resolve("never")


def test_plugin_without_hooks_is_reported(plugin_manager: PluginManager) -> None:
    with pytest.warns(PluginWarning, match="'empty'.*implements no rllm hook"):
        info = plugin_manager.register(object(), plugin_source("empty", "dist-e"))
    assert info.status == "failed"


def test_invalid_registrations_name_the_plugin(plugin_manager: PluginManager) -> None:
    source = plugin_source("careless", "dist-c", "0.1")
    with pytest.raises(PluginError, match=r"plugin 'careless', distribution dist-c 0\.1.*non-callable"):
        plugin_manager.add_estimator("x", 3, source)  # type: ignore[arg-type]
    with pytest.raises(PluginError, match="not field names"):
        plugin_manager.add_estimator("x", constant(1), source, requires=["response lengths"])
    with pytest.raises(PluginError, match="style"):
        plugin_manager.add_estimator("x", constant(1), source, style="flat")


def test_wrong_shape_output_names_estimator_plugin_and_group(plugin_manager: PluginManager) -> None:
    plugin_manager.register(
        Claims(short=lambda rewards, **kw: [g[:-1] for g in rewards]), plugin_source("p", "dist-p", "2.0")
    )
    with pytest.raises(EstimatorOutputError, match=r"'short'.*dist-p 2\.0.*group 'b'"):
        rllm.compute_advantages("short", [1.0, 2.0, 3.0], ["b", "b", "b"])


def test_warnings_do_not_fire_for_a_clean_registry(plugin_manager: PluginManager) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plugin_manager.register(Claims(clean=constant(1)), plugin_source("clean", "dist-clean"))
    assert value_of(plugin_manager, "clean") == 1.0


def test_an_undeclared_required_field_is_refused_at_registration(plugin_manager: PluginManager) -> None:
    source = plugin_source("careless", "dist-c", "0.1")
    with pytest.raises(
        PluginError, match=r"'needs_lengths' requiring 'response_length'.*did you mean 'response_lengths'"
    ):
        plugin_manager.add_estimator("needs_lengths", constant(1), source, requires=["response_length"])
    assert "needs_lengths" not in plugin_manager.estimators


def test_a_plugin_requiring_an_unknown_field_fails_and_is_rolled_back(plugin_manager: PluginManager) -> None:
    class Typo:
        @rllm.hookimpl
        def rllm_register_estimators(self, register: Any) -> None:
            register("fine", constant(1))
            register("typo", constant(1), requires=["dificulty"])

    with pytest.warns(PluginWarning, match=r"'typo'.*requiring 'dificulty', which is no batch field"):
        info = plugin_manager.register(Typo(), plugin_source("typo", "dist-t"))
    assert info.status == "failed"
    assert "fine" not in plugin_manager.estimators and "typo" not in plugin_manager.estimators


def test_a_field_the_same_plugin_declares_may_be_required(plugin_manager: PluginManager) -> None:
    from rllm.toolkit import BatchField

    class Declares:
        @rllm.hookimpl
        def rllm_register_estimators(self, register: Any) -> None:
            register("weighted", constant(1), requires=["difficulty"])

        @rllm.hookimpl
        def rllm_register_batch_fields(self, register: Any) -> None:
            register("difficulty", BatchField(read=lambda t: 1.0))

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        info = plugin_manager.register(Declares(), plugin_source("declares", "dist-d"))
    assert info.status == "ok" and "weighted" in plugin_manager.estimators


def test_the_guarded_names_are_rllms_own_estimators() -> None:
    """The names refused without replace=True are exactly rLLM's enum of estimators (OTHER aside)."""
    from rllm.config.names import rLLMAdvantageEstimator
    from rllm.contract.names import RLLM_ESTIMATORS

    assert set(RLLM_ESTIMATORS) == {e.value for e in rLLMAdvantageEstimator} - {"other"}
