"""Each vocabulary has one table; every other list of it is derived from that table or tied to it here.

A copy that drifts (a numerics choice added to the ``Literal`` but not the table, a kernel
name the acceleration module does not document, an ``AlgorithmConfig`` default that differs
from its schema key) fails one of these tests.
"""

from __future__ import annotations

import dataclasses
import typing

import pytest

from rllm.contract import names
from rllm.contract.options import NUMERICS_CHOICES, NUMERICS_OPTIONS, PRESET_NAMES
from rllm.estimators import acceleration, numerics

LITERALS = {
    "std": numerics.StdDivisor,
    "single": numerics.SinglePolicy,
    "zero_variance": numerics.ZeroVariancePolicy,
    "whiten": numerics.WhitenMode,
    "whiten_weight": numerics.WhitenWeight,
}


@pytest.mark.parametrize("name", sorted(LITERALS))
def test_numerics_literal_types_are_the_table(name: str) -> None:
    assert typing.get_args(LITERALS[name]) == NUMERICS_CHOICES[name]


def test_numerics_options_offer_the_table_and_the_presets() -> None:
    by_name = {option.name: option for option in NUMERICS_OPTIONS}
    for name, choices in NUMERICS_CHOICES.items():
        assert tuple(by_name[name].choices or ()) == choices, name
    assert tuple(by_name["whiten_std"].choices or ()) == NUMERICS_CHOICES["std"]
    assert set(numerics.PRESETS) == set(PRESET_NAMES)
    assert all(name in by_name["preset"].doc for name in PRESET_NAMES)
    # every table entry is a field of Numerics, and Numerics refuses a value outside it
    fields = {f.name for f in dataclasses.fields(numerics.Numerics)}
    assert set(NUMERICS_CHOICES) <= fields
    with pytest.raises(Exception, match="single must be one of 'raw', 'zero', 'error'"):
        numerics.Numerics(single="drop")  # type: ignore[arg-type]


def test_kernel_names_are_one_tuple_and_each_is_documented() -> None:
    assert acceleration.PRIMITIVES is names.KERNEL_NAMES
    assert (acceleration.GROUP_CENTRE, acceleration.SORTED_RUNS, acceleration.RUN_STARTS) == names.KERNEL_NAMES
    # the value a door resolves holds one slot per primitive, no more
    assert tuple(f.name for f in dataclasses.fields(acceleration.Kernels)) == names.KERNEL_NAMES
    for name in names.KERNEL_NAMES:
        assert f'``"{name}"``: ``fn(' in (acceleration.__doc__ or ""), f"acceleration does not document {name}"


def test_algorithm_config_defaults_are_the_schema_keys() -> None:
    from rllm.config.algorithm import _FIELD_KEYS, _SECTION_KEYS, AlgorithmConfig
    from rllm.config.schema import CORE_KEYS

    section = {
        key.path.removeprefix("rllm.algorithm."): key for key in CORE_KEYS if key.path.startswith("rllm.algorithm.")
    }
    assert {name.split(".")[0] for name in section} == set(_SECTION_KEYS)
    default = AlgorithmConfig()
    assert _FIELD_KEYS, "no algorithm field is tied to the schema"
    for name, key in _FIELD_KEYS.items():
        assert getattr(default, name) == key.default, f"AlgorithmConfig.{name} drifted from {key.path}"
    assert AlgorithmConfig.from_config({}) == default
    assert default.estimator == section["adv_estimator"].default


def test_checks_the_schema_makes_unreachable_are_gone() -> None:
    """The schema refuses these values first, naming the key; AlgorithmConfig keeps no second check."""
    import inspect

    from rllm.config.algorithm import AlgorithmConfig
    from rllm.errors import ConfigError
    from rllm.trainer.protocol import BackendProtocol

    source = inspect.getsource(AlgorithmConfig.__post_init__)
    for gone in ("lr_schedule", "loss_agg_mode", "router_replay", "nonfinite_rewards", "self.epsilon"):
        assert gone not in source
    for field_name, value in (("lr_schedule", "step"), ("nonfinite_rewards", "ignore"), ("epsilon", -1.0)):
        with pytest.raises(ConfigError, match=rf"^rllm\.algorithm\.{field_name} must be"):
            AlgorithmConfig(**{field_name: value})  # type: ignore[arg-type]
    assert "name" not in vars(BackendProtocol)  # never read by the trainer


def test_batch_fields_are_one_table() -> None:
    from pathlib import Path

    from rllm.cli.advantages import LINE_FIELDS
    from rllm.contract.fields import BUILTIN_FIELDS, OPTIONAL_FIELDS
    from rllm.estimators import OPTIONAL_FIELDS as ESTIMATOR_FIELDS
    from rllm.plugins import hookspecs

    assert hookspecs.OPTIONAL_FIELDS is OPTIONAL_FIELDS  # the plugin author's reference re-exports the floor's tuple
    assert OPTIONAL_FIELDS == ESTIMATOR_FIELDS == tuple(BUILTIN_FIELDS)
    readable = {name for name, field in BUILTIN_FIELDS.items() if field.jsonl_key}
    assert set(LINE_FIELDS) == readable and readable
    assert all(LINE_FIELDS[name] == (BUILTIN_FIELDS[name].jsonl_key, BUILTIN_FIELDS[name].doc) for name in readable)
    guide = (Path(__file__).resolve().parents[2] / "docs" / "estimators.md").read_text(encoding="utf-8")
    table = [line for line in guide.splitlines() if line.startswith("| `")]
    for name in BUILTIN_FIELDS:
        assert any(f"`{name}`" in line.split("|")[1] for line in table), f"docs/estimators.md lacks field {name}"


LITERAL_WORDS = {
    "EstimatorStyle": "ESTIMATOR_STYLES",
    "NonFinitePolicy": "NONFINITE_POLICIES",
    "KlController": "KL_CONTROLLERS",
    "TisMode": "TIS_MODES",
    "LrSchedule": "LR_SCHEDULES",
}


@pytest.mark.parametrize("literal", sorted(LITERAL_WORDS))
def test_each_literal_type_of_the_floor_is_its_tuple(literal: str) -> None:
    assert typing.get_args(getattr(names, literal)) == getattr(names, LITERAL_WORDS[literal])


def test_the_config_keys_offer_the_floors_tuples() -> None:
    """A key's choices are the floor's tuple itself, not a copy that could drift."""
    from rllm.config.algorithm import AlgorithmConfig, RolloutCorrectionConfig
    from rllm.config.schema import CORE_KEYS

    by_path = {key.path: key for key in CORE_KEYS}
    algorithm = "rllm.algorithm."
    assert by_path[algorithm + "lr_schedule"].choices is names.LR_SCHEDULES
    assert by_path[algorithm + "nonfinite_rewards"].choices is names.NONFINITE_POLICIES
    assert by_path[algorithm + "loss_agg_mode"].choices is names.LOSS_AGG_MODES
    assert by_path[algorithm + "kl_ctrl.type"].choices is names.KL_CONTROLLERS
    assert by_path[algorithm + "rollout_correction.tis_mode"].choices is names.TIS_MODES
    for key in ("kl_loss_type", "kl_penalty"):
        assert by_path[algorithm + key].choices is names.KL_KIND_CHOICES
    assert (*names.KL_KINDS, *(kind + "+" for kind in names.KL_KINDS)) == names.KL_KIND_CHOICES
    hints = typing.get_type_hints(AlgorithmConfig)
    assert hints["lr_schedule"] == names.LrSchedule and hints["nonfinite_rewards"] == names.NonFinitePolicy
    assert typing.get_type_hints(RolloutCorrectionConfig)["tis_mode"] == names.TisMode | None


@pytest.mark.parametrize(
    "key, table",
    [
        ("rllm.rejection_sample.mode", names.REJECTION_SAMPLING_MODES),
        ("rllm.workflow.failure_policy", names.FAILURE_POLICIES),
        ("rllm.workflow.executor", names.EXECUTOR_NAMES),
    ],
)
def test_a_config_keys_choices_are_the_floors_word_list(key: str, table: tuple[str, ...]) -> None:
    from rllm.config.schema import CORE_KEYS

    (entry,) = [k for k in CORE_KEYS if k.name == key]
    assert entry.choices is table


def test_the_method_lists_are_what_the_protocols_define() -> None:
    from rllm.engine import RolloutEngine
    from rllm.trainer.engine import Executor

    assert typing.get_args(names.RejectionSamplingMode) == names.REJECTION_SAMPLING_MODES
    assert all(callable(getattr(RolloutEngine, name, None)) for name in names.ENGINE_METHODS)
    protocol = {name for name, value in vars(Executor).items() if callable(value) and not name.startswith("_")}
    assert protocol == set(names.EXECUTOR_METHODS)
