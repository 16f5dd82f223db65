"""Keys that would be accepted and change nothing are said: refused, or warned by the unhonoured-key rules."""

from __future__ import annotations

import warnings

import pytest

from rllm.errors import ConfigError, EstimatorOptionError, RLLMWarning
from rllm.experimental.unified_trainer import UnifiedTrainer

CORRECTION = "rllm.algorithm.rollout_correction"


def _said(make_config, *overrides: str) -> list[str]:
    """The warnings building a trainer of ``overrides`` says (the config's load included)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        UnifiedTrainer(None, make_config(*overrides), progress=False).shutdown()
    return [str(w.message) for w in caught if issubclass(w.category, RLLMWarning)]


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        (("rllm.algorithm.entropy_coeff=0.1",), "rllm.algorithm.entropy_coeff=0.1"),
        (
            (f"{CORRECTION}.rollout_rs=token_k1", f"{CORRECTION}.rollout_rs_threshold=2.0"),
            f"{CORRECTION}.rollout_rs='token_k1'",
        ),
        ((f"{CORRECTION}.off_policy_mask_threshold=0.5",), f"{CORRECTION}.off_policy_mask_threshold=0.5"),
    ],
)
def test_the_embedded_backend_says_the_keys_it_cannot_honour(make_config, overrides: tuple[str, ...], key: str) -> None:
    said = _said(make_config, *overrides)
    assert any(message.startswith(f"{key} has no effect with the embedded backend") for message in said), said


@pytest.mark.parametrize("key", ["staleness_threshold=1", "max_batches_ahead=2", "allow_uncorrected=true"])
def test_async_keys_without_enable_are_said(make_config, key: str) -> None:
    said = _said(make_config, f"rllm.async_training.{key}")
    assert (
        f"rllm.async_training.{key.replace('true', 'True')} has no effect without rllm.async_training.enable=true."
        in said
    )


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ("rllm.transformers.lr=0.1",),
            "rllm.transformers.lr=0.1 configures the transformers backend, but this run trains with "
            "rllm.backend=embedded; set rllm.backend=transformers or leave the key out.",
        ),
        (
            ("rllm.backend=transformers", "rllm.embedded.temperature=0.5"),
            "rllm.embedded.temperature=0.5 configures the embedded backend, but this run trains with "
            "rllm.backend=transformers; set rllm.backend=embedded or leave the key out.",
        ),
    ],
)
def test_keys_of_another_backend_are_refused_in_one_line(make_config, overrides: tuple[str, ...], message: str) -> None:
    if "rllm.backend=transformers" in overrides:
        pytest.importorskip("torch")  # the backend is resolved (imported) first
    with pytest.raises(ConfigError) as caught:
        UnifiedTrainer(None, make_config(*overrides), progress=False)
    assert str(caught.value) == message


def test_an_empty_gateway_host_is_refused(make_config) -> None:
    with pytest.raises(ConfigError, match=r"^rllm.gateway.host must be a non-empty string; got ''"):
        make_config("rllm.gateway.host=")


def test_a_distill_discount_above_one_is_refused(make_config) -> None:
    distill = ("rllm.algorithm.adv_estimator=distill",)
    with pytest.raises(EstimatorOptionError, match=r"'kl_discount_factor' .* at most 1.0; got 1.5"):
        make_config(*distill, "rllm.algorithm.estimator_options.distill.kl_discount_factor=1.5")
    make_config(*distill, "rllm.algorithm.estimator_options.distill.kl_discount_factor=1.0")
