"""Inputs beyond rewards are checked where the batch takes them: one rule for every estimator reading them."""

from __future__ import annotations

import math

import pytest

import rllm
from rllm.errors import InputFieldError

REWARDS = [1.0, 0.0, 3.0, 1.0]
GROUPS = ["a", "a", "b", "b"]


@pytest.mark.parametrize("bad", [math.nan, -2.0, math.inf])
def test_opo_refuses_unusable_lengths_naming_the_field_group_and_position(bad: float) -> None:
    # before: opo fell back to the plain group mean for a NaN or negative total
    with pytest.raises(InputFieldError, match=r"'response_lengths'.*position 2 in group 'b'"):
        rllm.compute_advantages("opo", REWARDS, GROUPS, response_lengths=[3, 1, bad, 2])


def test_opo_and_token_whitening_share_the_length_rule() -> None:
    for name, options in (("opo", {}), ("grpo", {"preset": "openrlhf"})):
        with pytest.raises(InputFieldError, match=r"'response_lengths'.*position 1 in group 'a'"):
            rllm.compute_advantages(name, REWARDS, GROUPS, response_lengths=[3, -1, 2, 2], **options)
