"""The embedded backend's maths: loss gradients checked numerically, schedules, tasks and batching."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

import rllm.tasks
from rllm.engine import Generation
from rllm.errors import ConfigError
from rllm.tasks import ArithmeticWorkflow, build_tasks
from rllm.trainer import TaskLoader, lr_factor
from rllm.types import TerminationReason
from rllm_builtin.embedded.backend import EmbeddedRolloutEngine
from rllm_builtin.embedded.policy import SoftmaxPolicy, policy_loss


def _total_loss(policy: SoftmaxPolicy, kind: str, features, tokens, old, adv) -> float:
    log_p = policy.log_probs(features)[np.arange(len(tokens)), tokens]
    return float(policy_loss(kind, log_p, old, adv, 0.2, 0.2).loss.sum())


@pytest.mark.parametrize("kind", ["ppo", "importance_sampling"])
def test_loss_gradient_matches_finite_differences(kind: str) -> None:
    rng = np.random.default_rng(0)
    policy = SoftmaxPolicy(vocab_size=5, n_features=7)
    policy.weights[:] = rng.normal(size=policy.weights.shape)
    features = rng.integers(0, 7, size=(6, 1))
    tokens = rng.integers(0, 5, size=6)
    log_p = policy.log_probs(features)
    # old log-probs near the current ones (inside the clip range) so the loss is smooth here
    old = log_p[np.arange(6), tokens] + rng.uniform(-0.1, 0.1, size=6)
    adv = rng.normal(size=6)
    terms = policy_loss(kind, log_p[np.arange(6), tokens], old, adv, 0.2, 0.2)
    d_logits = -np.exp(log_p)
    d_logits[np.arange(6), tokens] += 1.0
    analytic = policy.logit_gradient(features, d_logits * terms.d_logp[:, None])
    numeric = np.zeros_like(policy.weights)
    for index in np.ndindex(policy.weights.shape):
        saved = policy.weights[index]
        policy.weights[index] = saved + 1e-6
        up = _total_loss(policy, kind, features, tokens, old, adv)
        policy.weights[index] = saved - 1e-6
        down = _total_loss(policy, kind, features, tokens, old, adv)
        policy.weights[index] = saved
        numeric[index] = (up - down) / 2e-6
    np.testing.assert_allclose(analytic, numeric, atol=1e-5)


def test_cispo_weights_log_probabilities_by_the_capped_ratio() -> None:
    logp = np.log(np.array([0.5, 0.5]))
    old = np.log(np.array([0.25, 0.45]))  # ratios 2 (capped at 1.2) and 1.11
    adv = np.array([1.0, -2.0])
    terms = policy_loss("cispo", logp, old, adv, 0.2, 0.2)
    # the weight is a constant: the gradient is -weight * A, and the capped token keeps its gradient
    np.testing.assert_allclose(terms.d_logp, [-1.2, 2.0 * 0.5 / 0.45])
    assert terms.clipped.tolist() == [True, False]


def test_ppo_stops_the_gradient_where_the_clip_binds() -> None:
    logp = np.log(np.array([0.5, 0.5, 0.5, 0.5]))
    old = np.log(np.array([0.25, 0.25, 0.8, 0.8]))  # ratios 2, 2, 0.625, 0.625
    adv = np.array([1.0, -1.0, 1.0, -1.0])
    terms = policy_loss("ppo", logp, old, adv, 0.2, 0.2)
    assert terms.clipped.tolist() == [True, False, False, True]
    assert terms.d_logp[0] == 0 and terms.d_logp[3] == 0
    assert terms.d_logp[1] == pytest.approx(2.0) and terms.d_logp[2] == pytest.approx(-0.625)
    with pytest.raises(ConfigError, match="Unknown loss 'dro'"):
        policy_loss("dro", logp, old, adv, 0.2, 0.2)


def test_learning_rate_schedules() -> None:
    assert [lr_factor("constant", 0.0, s, 10) for s in (1, 10)] == [1.0, 1.0]
    assert [lr_factor("linear", 0.2, s, 10) for s in (1, 2, 3, 10)] == [0.5, 1.0, 0.875, 0.0]
    assert lr_factor("cosine", 0.0, 5, 10) == pytest.approx(0.5)
    with pytest.raises(ConfigError, match="lr_schedule='step' is unknown"):
        lr_factor("step", 0.0, 1, 10)


def test_scheduled_lr_reads_the_runs_algorithm_config() -> None:
    from rllm import AlgorithmConfig
    from rllm.trainer import scheduled_lr

    # warmup_steps=2 of 10 wins over the ratio: 1/2, 1, then linear decay over the 8 steps left (1 - 1/8)
    steps = AlgorithmConfig(lr_schedule="linear", warmup_steps=2, warmup_steps_ratio=0.5)
    assert [scheduled_lr(0.1, steps, s, 10) for s in (1, 2, 3)] == pytest.approx([0.05, 0.1, 0.0875])
    ratio = AlgorithmConfig(lr_schedule="cosine", warmup_steps_ratio=0.0)
    assert scheduled_lr(2.0, ratio, 5, 10) == pytest.approx(1.0)  # halfway down the cosine


def test_task_loader_order_depends_only_on_the_seed() -> None:
    tasks = list(range(23))
    first = list(TaskLoader(tasks, 5, shuffle=True, seed=3))
    assert len(TaskLoader(tasks, 5, shuffle=True, seed=3)) == len(first) == 5
    assert first == list(TaskLoader(tasks, 5, shuffle=True, seed=3))
    assert first != list(TaskLoader(tasks, 5, shuffle=True, seed=4))
    assert sorted(task for batch in first for task in batch) == tasks


class ScriptedEngine:
    """Answers from a fixed script instead of sampling."""

    def __init__(self, answers: list[int]) -> None:
        self.answers = answers
        self.prompts: list[list[int]] = []

    async def generate(self, prompt_ids: list[int], max_tokens: int = 1) -> Generation:
        self.prompts.append(list(prompt_ids))
        return Generation([self.answers[len(self.prompts) - 1]], [-1.0], "")


def test_chain_workflow_stops_at_the_first_wrong_answer_and_scores_the_share_right() -> None:
    task = next(t for t in build_tasks(["digit_chain"]) if t["uid"] == "digit_chain:2+3")
    assert task["answers"] == [5, 8, 1]
    engine = ScriptedEngine([5, 7, 1])
    episode = asyncio.run(ArithmeticWorkflow(rollout_engine=engine).run(task, "digit_chain:2+3:0"))
    [trajectory] = episode.trajectories
    assert len(trajectory.steps) == 2 and engine.prompts[1] == [*task["prompt"], 5]
    assert trajectory.steps[-1].reward == pytest.approx(1 / 3) and not episode.is_correct
    assert episode.termination_reason is TerminationReason.ENV_DONE

    perfect = asyncio.run(ArithmeticWorkflow(rollout_engine=ScriptedEngine([5, 8, 1])).run(task, "x:0"))
    assert perfect.is_correct and perfect.trajectories[0].steps[-1].reward == 1.0


def test_untrained_policy_samples_uniformly_and_reports_its_log_probability() -> None:
    policy = SoftmaxPolicy(vocab_size=14, n_features=64)
    engine = EmbeddedRolloutEngine(policy, np.random.default_rng(0), temperature=1.0)
    generation = asyncio.run(engine.generate([1, 10, 2, 11], max_tokens=3))
    assert 1 <= len(generation.response_ids) <= 3
    assert generation.logprobs == pytest.approx([np.log(1 / 14)] * len(generation.response_ids))


def test_the_tasks_earlier_paths_give_the_core_objects() -> None:
    import rllm_builtin.embedded as embedded
    from rllm_builtin.embedded import tasks as earlier

    for name in rllm.tasks.__all__:
        assert getattr(earlier, name) is getattr(rllm.tasks, name), name
    assert embedded.ArithmeticWorkflow is rllm.tasks.ArithmeticWorkflow and embedded.VOCAB is rllm.tasks.VOCAB


def test_unknown_task_family_is_named() -> None:
    with pytest.raises(ConfigError, match=r"unknown: \['sudoku'\]"):
        build_tasks(["digit_sum", "sudoku"])
