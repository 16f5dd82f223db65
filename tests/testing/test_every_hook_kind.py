"""``all_checks(plugin=...)`` checks every kind of part a plugin registers, not only four of the seven hooks."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import rllm
from rllm.contract import ConfigKey
from rllm.errors import ConformanceError
from rllm.plugins import PluginManager, Source
from rllm.plugins.hook_kinds import HOOK_KINDS
from rllm.testing import all_checks
from rllm.toolkit import BatchField


class Parts:
    """A plugin with one part of each kind the kit could not see before: a kernel, a batch field, a section."""

    def __init__(self, centre: Any = None, default: Any = 3) -> None:
        self.centre, self.default = centre, default

    @rllm.hookimpl
    def rllm_register_kernels(self, register: Any) -> None:
        register("sorted_runs", self.centre or (lambda labels: None))  # None: the numpy path decides

    @rllm.hookimpl
    def rllm_register_batch_fields(self, register: Any) -> None:
        register("difficulty", BatchField(read=lambda t: t.info["difficulty"], doc="number: how hard the task is"))

    @rllm.hookimpl
    def rllm_register_config_sections(self, register: Any) -> None:
        register("rllm.parts", [ConfigKey("retries", "int", self.default, "Attempts per request.", minimum=0)])


def checks_of(manager: PluginManager, plugin: Parts) -> dict[str, Any]:
    info = manager.register(plugin, Source("plugin", "parts", "rllm-parts", "1.0"))
    assert not info.error, info.error
    return {check.id: check for check in all_checks(plugin="parts")}


def test_a_plugin_of_kernels_fields_and_sections_gets_one_check_per_part(plugin_manager: PluginManager) -> None:
    checks = checks_of(plugin_manager, Parts())
    assert set(checks) == {"sorted_runs-kernel", "difficulty-batch_field", "rllm.parts-config_section"}
    for check in checks.values():
        check()


def test_every_hook_kind_has_checks() -> None:
    from rllm.testing import _CHECKS

    assert set(_CHECKS) == {kind.attribute for kind in HOOK_KINDS}


def test_a_kernel_that_disagrees_with_numpy_fails_naming_it(plugin_manager: PluginManager) -> None:
    def wrong_runs(labels: np.ndarray) -> int:
        return 1  # claims one run whatever the labels: every group merges into one

    checks = checks_of(plugin_manager, Parts(centre=wrong_runs))
    with pytest.raises(ConformanceError, match=r"kernel 'sorted_runs' breaks (grpo|rloo)"):
        checks["sorted_runs-kernel"]()


def test_a_section_whose_default_fails_its_own_check_fails(plugin_manager: PluginManager) -> None:
    checks = checks_of(plugin_manager, Parts(default=-1))
    with pytest.raises(ConformanceError, match=r"config key rllm.parts.retries: its default -1 fails its own check"):
        checks["rllm.parts-config_section"]()
