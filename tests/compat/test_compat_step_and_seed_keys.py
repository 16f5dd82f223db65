"""rLLM code that builds steps from model outputs, and the seed's config keys, run unchanged."""

from __future__ import annotations

from dataclasses import dataclass

from rllm.config import load_config
from rllm.config.algorithm import AlgorithmConfig
from rllm.types import Step


@dataclass
class ModelOutput:
    """The attributes of rLLM's rollout-engine output that Step.from_model_output reads."""

    content: str | None = "4"
    reasoning: str | None = "2+2"
    prompt_ids: list[int] | None = None
    completion_ids: list[int] | None = None
    logprobs: list[float] | None = None
    weight_version: int | None = 3


def test_step_from_model_output() -> None:
    output = ModelOutput(prompt_ids=[1, 2], completion_ids=[7, 8, 9], logprobs=[-0.1, -0.2, -0.3])
    step = Step.from_model_output(output, messages=[{"role": "user", "content": "2+2?"}], action="4")
    assert (step.prompt_ids, step.response_ids, step.logprobs) == ([1, 2], [7, 8, 9], [-0.1, -0.2, -0.3])
    assert step.chat_completions == [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4", "reasoning": "2+2"},
    ]
    assert (step.thought, step.action, step.model_response, step.weight_version) == ("2+2", "4", "4", 3)
    assert step.model_output is output


def test_step_from_empty_model_output() -> None:
    step = Step.from_model_output(ModelOutput(content=None, reasoning=None, weight_version=None))
    assert (step.prompt_ids, step.response_ids, step.logprobs, step.thought, step.model_response) == (
        [],
        [],
        [],
        "",
        "",
    )


def test_seed_stepwise_use_rllm_key_is_read() -> None:
    config = load_config(overrides=["rllm.stepwise_advantage.use_rllm=false"])
    assert AlgorithmConfig.from_config(config).use_rllm is None  # false, the seed's default, is not a use


def test_taken_names_per_door_as_docs_plugins_md_says(plugin_manager: object) -> None:
    import warnings

    import numpy as np
    import pytest

    from rllm.errors import EstimatorConflictError
    from rllm.experimental.common.advantage import (
        RLLM_ADV_ESTIMATOR_REGISTRY,
        get_rllm_adv_estimator,
        register_rllm_adv_estimator,
    )

    def zeros(rewards: list[np.ndarray], **_: object) -> tuple[list[np.ndarray], list[np.ndarray]]:
        return [r * 0 for r in rewards], [r * 0 for r in rewards]

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # assignment replaces without a word
        RLLM_ADV_ESTIMATOR_REGISTRY["rloo"] = zeros
    with pytest.raises(EstimatorConflictError, match="estimator 'grpo', a name of built-in plugin 'builtin'"):
        register_rllm_adv_estimator("grpo")(zeros)
    register_rllm_adv_estimator("grpo", replace=True)(zeros)
    for name in ("rloo", "grpo"):
        lookup = get_rllm_adv_estimator(name)
        assert lookup.__wrapped__ is zeros  # type: ignore[attr-defined]
        advantages, _ = lookup([np.array([1.0, 0.0])])
        assert advantages[0].tolist() == [0.0, 0.0]
