"""rLLM's text interface on the transformers engine: get_model_response, and what a step keeps of it.

rLLM's own ``SimpleWorkflow`` (the unmodified fixture) asks the engine through the workflow
engine; every step's ids must be the chat template's prompt and the sampled completion, and
its log-probs those a fresh forward pass of the same weights gives (sampling at temperature
1 with no cut, so the sampling distribution is the model's own).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from extras import skip_module_without

skip_module_without("torch", "transformers", "safetensors", install="pip install 'rllm[transformers]' (CI does)")

import torch
from omegaconf import DictConfig
from upstream import upstream

from rllm.engine import ModelOutput
from rllm.errors import DataError, EngineCallError
from rllm.rewards.reward_types import RewardOutput
from rllm.tasks import TEXT_TASKS, text_reward
from rllm.trainer import AgentTrainer, UnifiedTrainer
from rllm.trainer.logging import METRICS_FILE, read_metrics
from rllm.types import Episode, TerminationReason
from rllm_transformers.warm_start import build_warm_start

MakeConfig = Callable[..., DictConfig]


def simple_workflow() -> type:
    return upstream("simple_workflow").SimpleWorkflow  # type: ignore[no-any-return]


def text_reward_fn(task: dict[str, Any], action: Any) -> RewardOutput:
    return RewardOutput(reward=text_reward(task, action))


TASKS = TEXT_TASKS["text_digit_max"]()[:6]


def _trainer(make: MakeConfig, *overrides: str) -> UnifiedTrainer:
    config = make("rllm.transformers.max_new_tokens=10", *overrides)
    return UnifiedTrainer(
        None, config, simple_workflow(), TASKS, TASKS, {"reward_function": text_reward_fn}, progress=False
    )


def _episodes(trainer: UnifiedTrainer, tasks: list[dict[str, Any]]) -> list[Episode]:
    engine = trainer.agent_workflow_engine
    return asyncio.run(engine.execute_tasks(tasks, [task["uid"] for task in tasks]))


RISE_STEPS = 40


@pytest.fixture(scope="module")
def default_warm_start(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The warm start as ``python -m rllm_transformers.warm_start`` makes it."""
    out = tmp_path_factory.mktemp("warm") / "model"
    build_warm_start(out)
    return out


@pytest.mark.parametrize("model", ["tiny", "warm start"])
def test_every_steps_ids_and_log_probs_are_what_a_fresh_forward_pass_gives(
    tiny_config: MakeConfig, warm_start: Path, model: str
) -> None:
    chosen = "rllm.transformers.tokenizer=text" if model == "tiny" else f"rllm.transformers.model={warm_start}"
    trainer = _trainer(tiny_config, chosen)
    try:
        episodes = _episodes(trainer, TASKS * 2)
        backend = trainer.backend
        tokenizer, network = backend.tokenizer, backend.model
        steps = [(ep, step) for ep in episodes for t in ep.trajectories for step in t.steps]
        assert len(steps) == 12 and all(ep.termination_reason is not TerminationReason.ERROR for ep, _ in steps)
        network.eval()
        for episode, step in steps:
            messages = [{"role": "user", "content": episode.task["question"]}]
            template = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=False)
            assert step.prompt_ids == list(template)
            output: ModelOutput = step.model_output
            assert output.completion_ids == step.response_ids and output.logprobs == step.logprobs
            assert output.text == tokenizer.decode(step.response_ids, skip_special_tokens=True)
            assert output.finish_reason == ("stop" if step.response_ids[-1] == tokenizer.eos_token_id else "length")
            ids = torch.tensor([step.prompt_ids + step.response_ids])
            with torch.no_grad():
                log_p = torch.log_softmax(network(input_ids=ids).logits[0, :-1].float(), dim=-1)
            fresh = log_p.gather(-1, ids[0, 1:, None]).squeeze(-1)[len(step.prompt_ids) - 1 :]
            assert torch.allclose(fresh, torch.tensor(step.logprobs), atol=1e-5, rtol=0)
            assert step.weight_version == 0
    finally:
        trainer.shutdown()


def test_a_prompt_over_the_limit_ends_its_episode_with_the_reason_not_an_error(tiny_config: MakeConfig) -> None:
    trainer = _trainer(tiny_config, "rllm.transformers.tokenizer=text", "rllm.transformers.max_prompt_length=20")
    try:
        episodes = _episodes(trainer, TASKS[:2])
        stats = trainer.agent_workflow_engine.stats
    finally:
        trainer.shutdown()
    assert [ep.termination_reason for ep in episodes] == [TerminationReason.MAX_PROMPT_LENGTH_EXCEEDED] * 2
    assert [ep.trajectories for ep in episodes] == [[], []] and stats.errors == 0 and stats.retries == 0


def test_an_option_the_engine_does_not_take_and_a_tokenizer_without_a_template_are_one_line(
    tiny_config: MakeConfig,
) -> None:
    trainer = _trainer(tiny_config, "rllm.transformers.tokenizer=text")
    digits = _trainer(tiny_config)
    messages = [{"role": "user", "content": "hi"}]
    try:
        engine = trainer.backend.engine
        with pytest.raises(EngineCallError, match=r"got 'temperature', which the transformers engine does not take"):
            asyncio.run(engine.get_model_response(messages, temperature=0.5))
        with pytest.raises(DataError, match=r"rllm.transformers.model's tokenizer has none: use rllm.transformers."):
            asyncio.run(digits.backend.engine.for_episode(1).get_model_response(messages))
    finally:
        trainer.shutdown()
        digits.shutdown()


def test_token_in_token_out_samples_the_same_as_the_chat_call_for_a_seed(tiny_config: MakeConfig) -> None:
    trainer = _trainer(tiny_config, "rllm.transformers.tokenizer=text")
    messages = [{"role": "user", "content": TASKS[0]["question"]}]
    try:
        engine = trainer.backend.engine
        assert engine.supports_token_in_token_out and engine.for_episode(3).supports_token_in_token_out
        chat = asyncio.run(engine.for_episode(3).get_model_response(messages))
        view = engine.for_episode(3)
        token_output = asyncio.run(view.get_token_output_from_token_input(chat.prompt_ids))
        assembled = view.assemble_model_output(chat.prompt_ids, token_output)
    finally:
        trainer.shutdown()
    assert (assembled.completion_ids, assembled.logprobs, assembled.text) == (
        chat.completion_ids,
        chat.logprobs,
        chat.text,
    )


def test_each_policy_update_raises_the_weight_version_the_engine_stamps(tiny_config: MakeConfig) -> None:
    trainer = _trainer(tiny_config, "rllm.transformers.tokenizer=text")
    try:
        trainer.fit()  # two steps
        engine = trainer.backend.engine
        assert engine.weight_version == 2 and engine.for_episode(0).weight_version == 2
        output = asyncio.run(engine.for_episode(0).get_model_response([{"role": "user", "content": "x"}]))
    finally:
        trainer.shutdown()
    assert output.weight_version == 2


@pytest.mark.slow
def test_rllms_simple_workflow_raises_validation_pass_at_1_on_the_text_digit_task(
    default_warm_start: Path, tmp_path: Path
) -> None:
    """The unmodified SimpleWorkflow through AgentTrainer, from the warm start (it reads digits and knows the format).

    bench/simple_workflow.py's settings (10 tasks x 32 rollouts, lr 1e-3, greedy validation on
    all 100 tasks), a shorter run: the warm start's greedy answers are right on about 0.2 of the
    tasks (a random digit would be on 0.1), and 0.9 comes at step 25-50 in the bench's runs.
    """
    tasks = TEXT_TASKS["text_digit_max"]()
    run = tmp_path / "run"
    AgentTrainer(
        workflow_class=simple_workflow(),
        workflow_args={"reward_function": text_reward_fn},
        train_dataset=tasks,
        val_dataset=tasks,
        backend="transformers",
        config=[
            "rllm.transformers.device=cpu",
            f"rllm.transformers.model={default_warm_start}",
            f"rllm.trainer.output_dir={run}",
            "rllm.trainer.logger=[jsonl]",
            "rllm.data.train_batch_size=10",
            "rllm.rollout.n=32",
            "rllm.trainer.total_epochs=100",
            f"rllm.trainer.total_batches={RISE_STEPS}",
            f"rllm.trainer.test_freq={RISE_STEPS}",
            "rllm.transformers.max_new_tokens=10",
            "rllm.transformers.lr=0.001",
        ],
    ).train()
    records = read_metrics(run / METRICS_FILE)
    curve = [r["val/text_digit_max/pass@1"] for r in records if r["kind"] == "val"]
    assert len(curve) == 2 and curve[0] <= 0.3 and curve[1] >= 0.7, curve
