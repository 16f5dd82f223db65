"""What counts as a number in a batch: the reward rule of every door and the checks of field values.

A reward is a real number, or None when it cannot be scored; strings, bytes, complex numbers
and other objects are refused, never converted, and integers that a float cannot hold exactly
are refused too. Batch fields follow the same rule (:meth:`AdvantageBatch._numbers`).
"""

from __future__ import annotations

from collections.abc import Iterator
from numbers import Real
from typing import Any

import numpy as np
from numpy.typing import NDArray

from rllm.errors import InputFieldError, RewardError
from rllm.estimators.ragged import FloatArray

__all__ = ["EXACT_INTEGERS", "float_rewards"]


EXACT_INTEGERS = 2**53
"""Integers beyond this size change value when they become floats."""


def float_rewards(rewards: Any, dtype: Any = np.float64) -> FloatArray:
    """``rewards`` as a float array; what would fail or change value on the way is a :class:`RewardError`.

    A generator (read once, of unknown length) is refused, as are integers too large for a
    float and integers beyond 2**53, which floats cannot hold exactly.
    """
    if isinstance(rewards, Iterator):
        raise RewardError(f"Rewards must be a list or an array, got a {type(rewards).__name__}; pass list(...) of it.")
    try:
        given = np.asarray(rewards)
    except OverflowError:
        given = np.asarray(rewards, dtype=object)
    _refuse_non_numbers(_culprits(given, rewards))
    if given.dtype.kind in "iuO" and given.size:
        numbers = given.reshape(-1)
        if given.dtype.kind == "O":
            numbers = np.array([v for v in numbers if isinstance(v, int) and not isinstance(v, bool)], dtype=object)
        big = np.flatnonzero(np.abs(numbers) > EXACT_INTEGERS) if numbers.size else np.zeros(0, dtype=int)
        if big.size:
            value = int(numbers[big[0]])
            shown = value if value.bit_length() < 200 else f"an integer of {len(str(abs(value)))} digits"
            raise RewardError(
                f"{big.size} integer reward(s) are beyond 2**53, where floats cannot hold them exactly (the "
                f"first: {shown}); scale the rewards down or pass them as floats."
            )
    try:
        return np.asarray(given, dtype=dtype)
    except (TypeError, ValueError) as exc:
        raise RewardError(f"Rewards must be numbers: {exc}.") from None


_KIND_NAMES = {"U": "a string", "S": "bytes", "c": "a complex number", "V": "a record", "M": "a date", "m": "a time"}


def _non_number(given: NDArray[Any]) -> tuple[int, str] | None:
    """The flat position of the first value that is neither a real number nor None, and how to show it."""
    if given.dtype.kind in _KIND_NAMES and given.size:
        first, value = 0, given.reshape(-1)[0]
    elif given.dtype.kind == "O":
        flat = given.reshape(-1)
        bad = [i for i, v in enumerate(flat.tolist()) if v is not None and not isinstance(v, Real)]
        if not bad:
            return None
        first, value = bad[0], flat[bad[0]]
    else:
        return None
    kind = _KIND_NAMES.get(np.asarray(value).dtype.kind, f"of type {type(value).__name__}")
    shown = value.item() if isinstance(value, np.generic) else value
    return first, f"{shown!r}, {kind}"


def _culprits(given: NDArray[Any], values: Any) -> NDArray[Any]:
    """``given``, or when numpy made a list of numbers and strings (or complex values) all strings, the list as objects.

    Then the value that is no real number is found at its own position.
    """
    if given.dtype.kind in _KIND_NAMES and not isinstance(values, np.ndarray):
        return np.asarray(values, dtype=object)
    return given


_NOT_CONVERTED = "strings, bytes, complex numbers and other objects are refused, not converted"


def _refuse_non_numbers(given: NDArray[Any]) -> None:
    """The one reward rule of every door: a real number, or None (unscorable); never converted from another type."""
    found = _non_number(given)
    if found is not None:
        raise RewardError(
            f"The reward at position {found[0]} is {found[1]}; a reward is a real number (or None when it "
            f"cannot be scored): {_NOT_CONVERTED}."
        )


def _given(name: str, values: Any) -> NDArray[Any]:
    """A field's values as numpy holds them, before any conversion (ragged nesting is an error naming it)."""
    try:
        given = np.asarray(values)
        return _culprits(given, values)
    except (ValueError, OverflowError):
        try:
            return np.asarray(values, dtype=object)
        except ValueError:
            raise InputFieldError(
                f"The batch field {name!r} is nested unevenly; give one number per trajectory "
                "(one row of numbers per trajectory for per-step fields)."
            ) from None
