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
    for name in hookspecs.KERNEL_NAMES:
        assert f'``"{name}"``: ``fn(' in (acceleration.__doc__ or ""), f"acceleration does not document {name}"
