"""``rllm train``'s sampling keys refuse what ``rllm serve``'s requests refuse: one check, TEMPERATURE_KEY/TOP_P_KEY."""

from __future__ import annotations

import pytest

from rllm.config import TEMPERATURE_KEY, TOP_P_KEY, load_config
from rllm.engine.openai_api import RequestError, parse
from rllm.errors import ConfigError

BAD = ["nan", "inf", "1e-310", "1e-46", "0", "-1", "3"]
"""NaN, infinite, subnormal, float32-zero, zero, negative, above the range."""


@pytest.mark.parametrize("value", BAD)
@pytest.mark.parametrize(
    ("backend", "key"),
    [
        ("transformers", "rllm.transformers.temperature"),
        ("transformers", "rllm.transformers.top_p"),
        ("embedded", "rllm.embedded.temperature"),
    ],
)
def test_the_train_door_refuses_in_one_line(backend: str, key: str, value: str) -> None:
    with pytest.raises(ConfigError, match=rf"^{key} must be a number >= .* and <= \d; got ") as caught:
        load_config(overrides=[f"rllm.backend={backend}", f"{key}={value}"])
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("value", [float(v) for v in BAD if v != "0"])
@pytest.mark.parametrize("field", ["temperature", "top_p"])
def test_the_serve_door_refuses_the_same_values(field: str, value: float) -> None:
    with pytest.raises(RequestError) as caught:
        parse({field: value}, [1, 2], False, 64)
    assert caught.value.param == field and caught.value.status == 400
    assert str(caught.value).startswith(f"{field} must be a number >= ")


def test_the_bounds_are_the_shared_keys_and_zero_temperature_is_greedy_in_serve() -> None:
    assert (TEMPERATURE_KEY.minimum, TEMPERATURE_KEY.maximum, TOP_P_KEY.minimum, TOP_P_KEY.maximum) == (
        0.01,
        2.0,
        1e-6,
        1.0,
    )
    assert parse({"temperature": 0}, [1], False, 64).greedy
    params = parse({"temperature": 0.01, "top_p": 1e-6}, [1], False, 64)
    assert (params.temperature, params.top_p, params.greedy) == (0.01, 1e-6, False)
    with pytest.raises(RequestError, match="top_p must be a number"):
        parse({"top_p": 0}, [1], False, 64)
