"""Options and config keys are one declaration type, ``rllm.contract.Setting``, under their old names."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import rllm
from rllm.config import ConfigKey
from rllm.contract import Setting
from rllm.errors import ConfigError, EstimatorOptionError, LossOptionError, PluginWarning
from rllm.plugins import PluginManager, Source
from rllm.toolkit import Option


def test_option_and_config_key_are_the_one_type() -> None:
    assert Option is Setting and ConfigKey is Setting
    key = ConfigKey("rllm.my_backend.retries", "int", 2, "Attempts per request.", minimum=0)
    assert key.path == key.name == "rllm.my_backend.retries" and key.types == (int,)
    option = Option("clip", (float,), 0.2, "clip range", minimum=0.0)
    assert option.type == option.types == (float,)


def test_one_declaration_checked_as_a_key_and_as_an_option_refuses_the_same_values() -> None:
    clip = Setting("clip", "float", 0.2, "clip range", minimum=0, above=True)
    assert clip.check(0.3) == 0.3 and clip.check(0.3, "ppo", what="loss", error=LossOptionError) == 0.3
    with pytest.raises(ConfigError, match=r"^clip must be a number > 0; got 0 \(int\)\.$"):
        clip.check(0)
    with pytest.raises(LossOptionError, match=r"^Option 'clip' of loss 'ppo' must be above 0; got 0\.$"):
        clip.check(0, "ppo", what="loss", error=LossOptionError)


def test_an_option_may_be_declared_with_a_type_word() -> None:
    k = Option("k", "int", 1, "the k of pass@k", minimum=1, multiple_of=2)
    assert k.check(4, "my_estimator") == 4
    with pytest.raises(EstimatorOptionError, match=r"Option 'k' of estimator 'my_estimator' must be an integer"):
        k.check(True, "my_estimator")
    with pytest.raises(EstimatorOptionError, match=r"must be at least 1 and a multiple of 2; got 3\."):
        k.check(3, "my_estimator")


def test_a_python_typed_option_takes_numpy_values_and_none_when_its_default_is_none() -> None:
    eps = Option("eps", (float,), None, "guard", minimum=0.0)
    assert eps.check(np.float32(0.5), "grpo") == 0.5 and type(eps.check(np.int64(1), "grpo")) is float
    assert eps.check(None, "grpo") is None
    with pytest.raises(EstimatorOptionError, match="must be a finite number; got inf"):
        eps.check(float("inf"), "grpo")


class Section:
    @rllm.hookimpl
    def rllm_register_config_sections(self, register: Any) -> None:
        register("rllm.my_backend", [Setting("retries", (int,), 2, "Attempts per request.")])


def test_a_config_section_declared_with_python_types_is_refused_naming_the_key(plugin_manager: PluginManager) -> None:
    with pytest.warns(PluginWarning, match="was not loaded"):
        info = plugin_manager.register(Section(), Source("plugin", "sections", "rllm-sections", "1.0"))
    assert info.error and "'retries' with Python types" in info.error and "a config key's type is a word" in info.error
