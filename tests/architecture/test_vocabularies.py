"""Each vocabulary has one table; every other list of it is derived from that table or tied to it here.

A copy that drifts (a numerics choice added to the ``Literal`` but not the table, a kernel
name the acceleration module does not document, an ``AlgorithmConfig`` default that differs
from its schema key) fails one of these tests.
"""

from __future__ import annotations

import dataclasses
import typing

import pytest

from rllm.estimators import acceleration, numerics
from rllm.plugins import hookspecs
from rllm.plugins.options import NUMERICS_CHOICES, NUMERICS_OPTIONS, PRESET_NAMES

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
    assert acceleration.PRIMITIVES is hookspecs.KERNEL_NAMES
    assert (acceleration.GROUP_CENTRE, acceleration.SORTED_RUNS, acceleration.RUN_STARTS) == hookspecs.KERNEL_NAMES
    # the value a door resolves holds one slot per primitive, no more
    assert tuple(f.name for f in dataclasses.fields(acceleration.Kernels)) == hookspecs.KERNEL_NAMES
    for name in hookspecs.KERNEL_NAMES:
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
    from rllm.estimators import OPTIONAL_FIELDS as ESTIMATOR_FIELDS
    from rllm.plugins.fields import BUILTIN_FIELDS

    assert hookspecs.OPTIONAL_FIELDS == ESTIMATOR_FIELDS == tuple(BUILTIN_FIELDS)
    readable = {name for name, field in BUILTIN_FIELDS.items() if field.jsonl_key}
    assert set(LINE_FIELDS) == readable and readable
    assert all(LINE_FIELDS[name] == (BUILTIN_FIELDS[name].jsonl_key, BUILTIN_FIELDS[name].doc) for name in readable)
    guide = (Path(__file__).resolve().parents[2] / "docs" / "estimators.md").read_text(encoding="utf-8")
    table = [line for line in guide.splitlines() if line.startswith("| `")]
    for name in BUILTIN_FIELDS:
        assert any(f"`{name}`" in line.split("|")[1] for line in table), f"docs/estimators.md lacks field {name}"
