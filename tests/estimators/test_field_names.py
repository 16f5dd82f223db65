"""A plugin's batch field may not take a name that rllm uses for something else: the plugin is not loaded."""

from __future__ import annotations

from typing import Any

import pytest

import rllm
from rllm.errors import PluginWarning
from rllm.estimators.batch import AdvantageBatch
from rllm.plugins.fields import BATCH_ATTRIBUTES, BUILTIN_FIELDS
from rllm.plugins.manager import PluginManager
from rllm.plugins.registry import Source
from rllm.toolkit import BatchField


class FieldPlugin:
    def __init__(self, name: str, field: BatchField) -> None:
        self.name, self.field = name, field

    @rllm.hookimpl
    def rllm_register_batch_fields(self, register: Any) -> None:
        register(self.name, self.field)


def register_field(manager: PluginManager, name: str, **field: Any) -> None:
    manager.register(FieldPlugin(name, BatchField(read=lambda t: 0.0, **field)), Source("plugin", "rllm-shadowing"))


@pytest.mark.parametrize(
    "name", ["layout", "dtype", "n_groups", "nonfinite_rewards", "describe", "preset", "eps", "std", "components"]
)
def test_a_field_shadowing_an_internal_or_an_option_is_refused_naming_the_plugin(
    plugin_manager: PluginManager, name: str
) -> None:
    with pytest.warns(PluginWarning, match=rf"'rllm-shadowing' registered batch field {name!r}.*shadow"):
        register_field(plugin_manager, name)
    assert name not in plugin_manager.batch_fields.names()


@pytest.mark.parametrize("field", [{"jsonl_key": "reward"}, {"jsonl_key": "task_id"}, {"jsonl_key": "baseline_reward"}])
def test_a_field_reading_a_key_rllm_reads_itself_is_refused(plugin_manager: PluginManager, field: Any) -> None:
    with pytest.warns(PluginWarning, match=rf"not loaded: plugin 'rllm-shadowing'.*JSON key {field['jsonl_key']!r}"):
        register_field(plugin_manager, "difficulty", **field)


@pytest.mark.filterwarnings("error")
def test_an_ordinary_field_name_is_accepted(plugin_manager: PluginManager) -> None:
    register_field(plugin_manager, "difficulty", jsonl_key="hardness")
    assert "difficulty" in plugin_manager.batch_fields.names()


def test_every_public_name_of_the_batch_is_reserved() -> None:
    batch = AdvantageBatch([1.0, 0.0], [0, 0])
    fields = {"rewards", *BUILTIN_FIELDS}  # fields are refused as "a field rllm already fills"
    public = {n for n in (*vars(AdvantageBatch), *vars(batch)) if not n.startswith("_")} - fields
    assert public <= set(BATCH_ATTRIBUTES), sorted(public - set(BATCH_ATTRIBUTES))
