"""The config schema and the losses accept the same KL kinds: one vocabulary, read in two places."""

from __future__ import annotations

import pytest

from rllm.config import CORE_KEYS
from rllm.errors import LossOptionError
from rllm.losses import KL_KINDS, check_kl_kind

VERL_KL_KINDS = {"kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3"}
"""verl's ``kl_penalty`` names, written out here rather than read from rllm."""


def _schema_choices() -> tuple[str, ...]:
    (key,) = [k for k in CORE_KEYS if k.path == "rllm.algorithm.kl_loss_type"]
    assert key.choices is not None
    return key.choices


def test_the_schema_offers_exactly_the_kinds_the_losses_accept() -> None:
    choices = _schema_choices()
    assert set(KL_KINDS) == VERL_KL_KINDS
    assert set(choices) == VERL_KL_KINDS | {kind + "+" for kind in VERL_KL_KINDS}
    assert len(choices) == len(set(choices)) == 14
    assert [check_kl_kind(kind) for kind in choices] == list(choices)


@pytest.mark.parametrize("kind", ["k4", "k3++", "+k3", "low-var-kl"])
def test_a_kind_outside_the_vocabulary_is_refused_by_both(kind: str) -> None:
    assert kind not in _schema_choices()
    with pytest.raises(LossOptionError, match="is not a KL kind"):
        check_kl_kind(kind)
