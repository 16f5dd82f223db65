"""Two-step ``RLLMGRPOTrainer`` runs of the tiny model on CPU: every built-in outcome estimator, a plugin's, and
every registered loss.

The outcome estimators are read from the registry: the built-in plugin's estimators that require
no per-step or per-token field. Those whose other inputs TRL computes train; the others are
refused before training, naming the field. A run trains when every parameter update is finite,
some parameter moved, and the advantages it used are finite with at least one non-zero.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from extras import skip_module_without

skip_module_without("torch", "trl", install="pip install 'rllm[trl]' (CI does)")

import tiny_trl
import torch

import rllm
from rllm.contract.fields import BUILTIN_FIELDS
from rllm.errors import MissingInputError
from rllm.plugins.discovery import BUILTIN_PLUGIN
from rllm.plugins.registry import Source

ROOT = Path(__file__).resolve().parents[2]
OPTIONS = {"mix": {"components": "0.5*grpo + 0.5*rloo"}, "dro": {"dro_beta": 0.1}}
"""Options an estimator or loss cannot run without."""
LOSSES = [
    name
    for name in rllm.get_plugin_manager().losses.names()
    if rllm.get_plugin_manager().losses.resolve(name).alias_of is None
]
"""Every registered loss but the aliases (the same function under another name)."""


def outcome_estimators() -> list[str]:
    """The built-in plugin's estimators that take one reward per trajectory (no per-step or per-token input)."""
    stepwise = {name for name, field in BUILTIN_FIELDS.items() if field.per_step or field.per_token}
    manager = rllm.get_plugin_manager()
    return [
        name
        for name in manager.estimators.names()
        if rllm.get_estimator(name).source.plugin == BUILTIN_PLUGIN
        and not stepwise & set(rllm.get_estimator(name).requires)
    ]


def trl_computes(name: str) -> bool:
    from rllm_trl.trainer import FROM_TRL

    return set(rllm.get_estimator(name).requires) <= set(FROM_TRL)


OUTCOME = outcome_estimators()
TRAINED = [name for name in OUTCOME if trl_computes(name)]


def test_the_outcome_estimators_are_the_expected_kinds() -> None:
    assert {"grpo", "rloo", "reinforce_plus_plus_baseline", "opo", "gdpo", "ema_baseline", "mix"} <= set(TRAINED)
    assert "remax" in OUTCOME and "remax" not in TRAINED  # needs baseline_rewards, which TRL does not compute
    assert not {"gae", "reinforce_plus_plus", "optimal_token_baseline", "gigpo"} & set(OUTCOME)


def train(tmp_path: Path, steps: int = 2, prompts: int = 2, **bridge) -> tuple[object, list[torch.Tensor]]:
    """A run of ``steps`` steps of ``prompts`` x 4 completions; returns the trainer and each batch's advantages."""
    from rllm_trl import RLLMGRPOTrainer

    trainer = RLLMGRPOTrainer(
        model=tiny_trl.model(),
        processing_class=tiny_trl.tokenizer(),
        reward_funcs=[tiny_trl.count_a, tiny_trl.length_reward],
        args=tiny_trl.config(tmp_path, max_steps=steps, per_device_train_batch_size=4 * prompts),
        train_dataset=tiny_trl.dataset(),
        **bridge,
    )
    seen: list[torch.Tensor] = []
    generate = trainer._generate_and_score_completions

    def recording(inputs):
        output = generate(inputs)
        seen.append(output["advantages"].detach().clone())
        return output

    trainer._generate_and_score_completions = recording
    before = [p.detach().clone() for p in trainer.model.parameters()]
    tiny_trl.train(trainer)
    after = list(trainer.model.parameters())
    assert all(torch.isfinite(p).all() for p in after)
    assert any(not torch.equal(a, b) for a, b in zip(before, after, strict=True)), "no parameter moved"
    assert len(seen) == steps and all(torch.isfinite(a).all() for a in seen)
    assert any(a.abs().max() > 0 for a in seen), "every advantage was 0"
    return trainer, seen


@pytest.mark.slow
@pytest.mark.parametrize("estimator", TRAINED)
def test_each_outcome_estimator_trains_the_tiny_model(tmp_path: Path, estimator: str) -> None:
    trainer, _ = train(tmp_path, estimator=estimator, estimator_options=OPTIONS.get(estimator))
    assert trainer.state.global_step == 2


@pytest.mark.parametrize("estimator", [name for name in OUTCOME if name not in TRAINED])
def test_an_outcome_estimator_needing_more_than_rewards_is_refused_before_training(
    tmp_path: Path, estimator: str
) -> None:
    with pytest.raises(MissingInputError, match="which TRL's GRPOTrainer does not compute"):
        train(tmp_path, estimator=estimator)


@pytest.mark.slow
def test_an_estimator_from_a_plugin_trains_the_tiny_model(tmp_path: Path, monkeypatch, plugin_manager) -> None:
    from rllm_trl import plugin as trl_plugin

    monkeypatch.syspath_prepend(str(ROOT / "plugins" / "example"))
    from rllm_example_estimators import plugin as example

    plugin_manager.register(trl_plugin, Source("plugin", "trl", "rllm", "test"))
    plugin_manager.register(example, Source("plugin", "example", "rllm-example-estimators", "1.0.0"))
    assert rllm.get_estimator("scaled_median").source.plugin == "example"
    _, seen = train(tmp_path, estimator="scaled_median", estimator_options={"clip": 1.0}, loss="trl.grpo")
    assert max(float(a.abs().max()) for a in seen) <= 1.0 + 1e-6  # the plugin's clip reached it


@pytest.mark.slow
@pytest.mark.parametrize("loss", LOSSES)
def test_each_registered_loss_trains_the_tiny_model_for_a_step(tmp_path: Path, loss: str) -> None:
    trainer, _ = train(tmp_path, steps=1, prompts=1, estimator="rloo", loss=loss, loss_options=OPTIONS.get(loss))
    assert trainer.rllm_loss.name == loss


@pytest.mark.slow
def test_evaluation_uses_the_estimator_and_the_loss(tmp_path: Path) -> None:
    from rllm_trl import RLLMGRPOTrainer

    trainer = RLLMGRPOTrainer(
        model=tiny_trl.model(),
        processing_class=tiny_trl.tokenizer(),
        reward_funcs=[tiny_trl.count_a, tiny_trl.length_reward],
        args=tiny_trl.config(tmp_path, per_device_eval_batch_size=4, num_generations_eval=2),
        train_dataset=tiny_trl.dataset(),
        eval_dataset=tiny_trl.dataset(2),
        estimator="rloo",
        loss="vanilla",
    )
    seen, scored = [], []
    generate, score = trainer._generate_and_score_completions, trainer._calculate_rewards
    trainer._generate_and_score_completions = lambda inputs: seen.append(generate(inputs)) or seen[-1]
    trainer._calculate_rewards = lambda *args: scored.append(score(*args)) or scored[-1]
    metrics = trainer.evaluate()
    assert torch.isfinite(torch.tensor(metrics["eval_loss"]))
    assert len(seen) == len(scored) > 0
    for output, rewards in zip(seen, scored, strict=True):  # RLOO over pairs of num_generations_eval=2
        pairs = torch.nansum(rewards, dim=1).view(-1, 2)
        expected = torch.stack([pairs[:, 0] - pairs[:, 1], pairs[:, 1] - pairs[:, 0]], dim=1).flatten()
        assert torch.allclose(output["advantages"], expected, atol=1e-6)
    assert any(output["advantages"].abs().max() > 0 for output in seen)
