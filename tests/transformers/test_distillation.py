"""On-policy distillation on the transformers backend: a teacher's log-probs as ``teacher_log_probs``, rLLM's workflow.

The teacher is the warm start (a tiny text model that already speaks the text tasks' reply
format); the student is ``tiny`` with the same text tokenizer and random weights. The
expected numbers are forward passes of the two models, computed here, never the backend's.
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from extras import skip_module_without

skip_module_without("torch", "transformers", "safetensors", install="pip install 'rllm[transformers]' (CI does)")

import torch
from omegaconf import DictConfig

from rllm.errors import ConfigError
from rllm.rewards.reward_types import RewardOutput
from rllm.tasks import TEXT_TASKS, text_reward
from rllm.trainer import UnifiedTrainer
from rllm.types import Episode
from rllm_transformers.engine import Sampling, TransformersEngine, UniformStream
from rllm_transformers.model import load_tokenizer
from rllm_transformers.plugin import INIT_STD
from rllm_transformers.warm_start import build_warm_start

MakeConfig = Callable[..., DictConfig]
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "rllm_upstream"
TASKS = TEXT_TASKS["text_digit_max"]()[:8]


def upstream(name: str, attribute: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"rllm_upstream_{name}", FIXTURES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, attribute)


def text_reward_fn(task: dict[str, Any], action: Any) -> RewardOutput:
    return RewardOutput(reward=text_reward(task, action))


@pytest.fixture(scope="module")
def teacher_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The warm start of the reply format alone, from tiny's initial std at lr 0.01: a peaked teacher.

    From the default warm start (reading lessons, std 0.1, lr 0.003) the run below goes the wrong
    way, reverse KL 4.0 -> 4.9 nats: the student writes the reply's first token at later positions
    with probability ~1, where the clip caps its penalty at -2 (docs/estimators.md).
    """
    out = tmp_path_factory.mktemp("teacher") / "model"
    build_warm_start(out, steps=60, init_std=INIT_STD, lessons=False, lr=0.01)
    return out


def scored(model: Any, ids: list[int]) -> list[float]:
    """log p(ids[t] | ids[:t]) for t >= 1, by one forward pass."""
    row = torch.tensor([ids])
    with torch.no_grad():
        log_p = torch.log_softmax(model(input_ids=row).logits[0, :-1].float(), dim=-1)
    return log_p.gather(-1, row[0, 1:, None]).squeeze(-1).tolist()


def _trainer(make: MakeConfig, teacher: Path, *overrides: str, workflow: str = "simple_workflow") -> UnifiedTrainer:
    config = make(
        "rllm.transformers.tokenizer=text",
        "rllm.transformers.max_new_tokens=10",
        "rllm.algorithm.adv_estimator=distill",
        f"rllm.transformers.teacher={teacher}",
        *overrides,
    )
    workflow_class = upstream(workflow, "SimpleWorkflow")
    args = {"reward_function": text_reward_fn}
    return UnifiedTrainer(None, config, workflow_class, TASKS, TASKS, args, progress=False)


def reverse_kl(trainer: UnifiedTrainer, teacher: Any, rounds: int = 3) -> float:
    """Mean over sampled tokens of log student - log teacher (a sample of KL(student || teacher))."""
    engine = trainer.agent_workflow_engine
    tasks = TASKS * rounds
    episodes: list[Episode] = asyncio.run(engine.execute_tasks(tasks, [f"{t['uid']}:{i}" for i, t in enumerate(tasks)]))
    gaps = []
    for step in (s for ep in episodes for t in ep.trajectories for s in t.steps):
        ids = step.prompt_ids + step.response_ids
        theirs = scored(teacher, ids)[len(step.prompt_ids) - 1 :]
        gaps.extend(s - t for s, t in zip(step.logprobs, theirs, strict=True))
    return sum(gaps) / len(gaps)


def test_stage_5_writes_the_teachers_log_prob_of_each_sampled_token(tiny_config: MakeConfig, teacher_dir: Path) -> None:
    trainer = _trainer(tiny_config, teacher_dir, "rllm.trainer.total_batches=1")
    teacher_model = trainer.backend.teacher
    captured: list[Any] = []
    original = trainer.backend.process_backend_batch

    async def keep(state: Any) -> None:
        await original(state)
        captured.extend(state.backend_batch.steps)

    trainer.backend.process_backend_batch = keep  # type: ignore[method-assign]
    try:
        trainer.fit()
    finally:
        trainer.shutdown()
    assert captured
    for step in captured:
        expected = scored(teacher_model, step.prompt_ids + step.response_ids)[len(step.prompt_ids) - 1 :]
        assert step.info["teacher_log_probs"] == pytest.approx(expected, abs=1e-5)
        # the estimator's advantage of each token: the teacher's log-prob minus the sampler's
        assert step.advantage == pytest.approx([t - s for t, s in zip(expected, step.logprobs, strict=True)], abs=1e-5)


@pytest.mark.slow
def test_a_student_distilled_from_the_warm_start_approaches_it(tiny_config: MakeConfig, teacher_dir: Path) -> None:
    trainer = _trainer(
        tiny_config,
        teacher_dir,
        "rllm.trainer.total_epochs=100",
        "rllm.trainer.total_batches=60",
        "rllm.data.train_batch_size=8",
        "rllm.transformers.lr=0.01",
        "+rllm.algorithm.estimator_options.clip_min=-2.0",
        "+rllm.algorithm.estimator_options.clip_max=2.0",
    )
    try:
        teacher = trainer.backend.teacher
        before = reverse_kl(trainer, teacher)
        trainer.fit()
        after = reverse_kl(trainer, teacher)
    finally:
        trainer.shutdown()
    assert before > 4.0, before  # a random student is far from the teacher (5.6 nats per token with this seed)
    assert after < 0.7 * before, (before, after)  # 60 steps bring it to 3.1 (seeds 0 and 3)


def _teacher_engine(model: Any, teacher_dir: Path) -> TransformersEngine:
    return TransformersEngine(
        model,
        load_tokenizer(str(teacher_dir)),
        torch.device("cpu"),
        UniformStream(0),
        Sampling(1.0, 1.0, 0),
        max_new_tokens=10,
        max_prompt_length=512,
        greedy_validation=True,
    )


def _distilling(tiny_config: MakeConfig, teacher: TransformersEngine) -> UnifiedTrainer:
    """A trainer whose workflow is rLLM's DistillationWorkflow, unmodified, with ``teacher`` as its teacher."""
    return UnifiedTrainer(
        None,
        tiny_config("rllm.transformers.tokenizer=text", "rllm.transformers.max_new_tokens=10"),
        upstream("distillation_workflow", "DistillationWorkflow"),
        TASKS,
        TASKS,
        {"reward_function": text_reward_fn, "teacher_engine": teacher, "shared_tokenizer": True},
        progress=False,
    )


def test_rllms_distillation_workflow_runs_with_a_teacher_engine(tiny_config: MakeConfig, teacher_dir: Path) -> None:
    """rLLM's DistillationWorkflow, unmodified: each token's advantage is the teacher's log-prob minus the student's."""
    from transformers import AutoModelForCausalLM

    teacher_model = AutoModelForCausalLM.from_pretrained(str(teacher_dir)).eval()
    trainer = _distilling(tiny_config, _teacher_engine(teacher_model, teacher_dir))
    try:
        engine = trainer.agent_workflow_engine
        episodes = asyncio.run(engine.execute_tasks(TASKS[:3], [task["uid"] for task in TASKS[:3]]))
    finally:
        trainer.shutdown()
    steps = [step for ep in episodes for t in ep.trajectories for step in t.steps]
    assert len(steps) == 3
    for step in steps:
        expected = scored(teacher_model, step.prompt_ids + step.response_ids)[len(step.prompt_ids) - 1 :]
        assert step.advantage == pytest.approx([t - s for t, s in zip(expected, step.logprobs, strict=True)], abs=1e-5)


def test_rllms_distillation_workflow_leaves_its_teacher_alone_while_validating(
    tiny_config: MakeConfig, teacher_dir: Path
) -> None:
    """rLLM's workflow reads ``rollout_engine.is_validation``: the workflow engine sets it for validation episodes."""
    from transformers import AutoModelForCausalLM

    teacher = _teacher_engine(AutoModelForCausalLM.from_pretrained(str(teacher_dir)).eval(), teacher_dir)
    asked: list[int] = []
    scored_by_teacher = teacher.compute_logprobs

    async def counted(ids: Any) -> list[float]:
        asked.append(len(ids))
        return await scored_by_teacher(ids)

    teacher.compute_logprobs = counted  # type: ignore[method-assign]
    trainer = _distilling(tiny_config, teacher)
    ids = [task["uid"] for task in TASKS[:2]]
    try:
        engine = trainer.agent_workflow_engine
        validated = asyncio.run(engine.execute_tasks(TASKS[:2], ids, is_validation=True))
        assert asked == [] and engine.rollout_engine.is_validation is False  # reset after validation
        trained = asyncio.run(engine.execute_tasks(TASKS[:2], ids))
    finally:
        trainer.shutdown()
    assert [s.advantage for ep in validated for t in ep.trajectories for s in t.steps] == [None, None]
    assert len(asked) == 2 and all(s.advantage for ep in trained for t in ep.trajectories for s in t.steps)


def test_the_teacher_key_and_the_estimator_need_each_other(tiny_config: MakeConfig, teacher_dir: Path) -> None:
    workflow_class = upstream("simple_workflow", "SimpleWorkflow")
    args = {"reward_function": text_reward_fn}
    with pytest.raises(
        ConfigError, match=r"^Estimator 'distill' needs teacher_log_probs: set rllm.transformers.teacher"
    ):
        config = tiny_config("rllm.transformers.tokenizer=text", "rllm.algorithm.adv_estimator=distill")
        UnifiedTrainer(None, config, workflow_class, TASKS, TASKS, args, progress=False)
    with pytest.raises(ConfigError, match=r"is set but no estimator of the run reads teacher_log_probs"):
        config = tiny_config("rllm.transformers.tokenizer=text", f"rllm.transformers.teacher={teacher_dir}")
        UnifiedTrainer(None, config, workflow_class, TASKS, TASKS, args, progress=False)


def test_a_teacher_with_another_tokenizer_is_refused_naming_both(tiny_config: MakeConfig, teacher_dir: Path) -> None:
    """The digit tokenizer's tiny student cannot learn from the text tokenizer's teacher."""
    with pytest.raises(ConfigError, match=r"teacher=.* has another tokenizer \(\d+ tokens, EOS .*\) than the student"):
        config = tiny_config("rllm.algorithm.adv_estimator=distill", f"rllm.transformers.teacher={teacher_dir}")
        UnifiedTrainer(None, config, progress=False)
